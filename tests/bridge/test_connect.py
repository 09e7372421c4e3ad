"""`pocolobby connect`: the host's entry (for Claude Code in its local scope, `~/.claude.json`, or
with --scope project the shared `.mcp.json`) and the launch command, run as the real CLI; and a
bridge started from exactly the command that entry names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.claude_code import claude_executable
from tests.bridge.host import Host
from tests.bridge.npm_hosts import npm_host
from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)


def connect(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`pocolobby connect ARGS` in `project`; HOME is the project's `.home` unless `env` names
    one, so Claude Code's state file is never the tester's own."""
    environ = clean_env(
        {"PYTHONPATH": str(REPO_ROOT), "HOME": str(project / ".home"), **(env or {})}
    )
    if "CLAUDE_CONFIG_DIR" not in (env or {}):
        environ.pop("CLAUDE_CONFIG_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "connect", *args],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def agent_file(directory: Path, name: str = "beta.json") -> Path:
    path = directory / name
    path.write_text(
        json.dumps(
            {"url": "http://127.0.0.1:8787", "token": "plt_x", "lobby": "team", "agent": "beta"}
        )
    )
    path.chmod(0o600)
    return path


def local_entries(home: Path, project: Path) -> dict[str, Any]:
    """The MCP servers Claude Code's local scope holds for `project` in HOME's state file."""
    state = json.loads((home / ".claude.json").read_text())
    return state["projects"][str(project.resolve())]["mcpServers"]


def test_connect_puts_claude_codes_entry_in_the_local_scope_keeping_its_state_file(
    tmp_path: Path,
):
    project, home = tmp_path / "project", tmp_path / "home"
    (project / "sub").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    config = agent_file(home)
    other = {"type": "stdio", "command": "npx", "args": ["some-server"], "env": {}}
    # Claude Code's busy state file: other keys, other projects, another server of this one.
    state = {
        "numStartups": 7,
        "mcpServers": {"mine": other},
        "projects": {
            "/elsewhere": {"mcpServers": {"pocolobby": other}},
            str(project.resolve()): {"hasTrustDialogAccepted": True, "mcpServers": {"x": other}},
        },
    }
    (home / ".claude.json").write_text(json.dumps(state))
    (home / ".claude.json").chmod(0o600)
    env = {"HOME": str(home)}

    # From a folder inside the repository: Claude Code files the project under its git root.
    result = connect(project / "sub", "--config", str(config), env=env)
    assert result.returncode == 0, result.stderr
    where = f"{home / '.claude.json'} (Claude Code's local scope for {project.resolve()})"
    assert f"added mcpServers.pocolobby in {where}" in result.stdout
    assert "server:pocolobby" in result.stdout
    assert not (project / ".mcp.json").exists() and not (project / "sub" / ".mcp.json").exists()
    after = json.loads((home / ".claude.json").read_text())
    entry = after["projects"][str(project.resolve())]["mcpServers"].pop("pocolobby")
    assert after == state  # everything else kept as it was
    assert (home / ".claude.json").stat().st_mode & 0o777 == 0o600
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-3:] == ["bridge", "--config", str(config.resolve())]
    settings = json.loads((project / "sub" / ".claude" / "settings.local.json").read_text())
    assert "enabledMcpjsonServers" not in settings and "statusLine" in settings

    written = (home / ".claude.json").read_bytes()
    again = connect(project / "sub", "--config", str(config), env=env)
    assert again.returncode == 0 and f"kept mcpServers.pocolobby in {where}" in again.stdout
    assert (home / ".claude.json").read_bytes() == written  # untouched when nothing changes

    # CLAUDE_CONFIG_DIR moves the state file, as it moves Claude Code's.
    elsewhere = tmp_path / "claude-config"
    moved = connect(
        project, "--config", str(config), env={**env, "CLAUDE_CONFIG_DIR": str(elsewhere)}
    )
    assert moved.returncode == 0, moved.stderr
    launch = f"CLAUDE_CONFIG_DIR={elsewhere} claude --dangerously-load-development-channels"
    assert launch in moved.stdout
    assert set(local_entries(elsewhere, project)) == {"pocolobby"}

    # A worktree belongs to its main checkout's project.
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "worktree", "add", "-q", str(tmp_path / "wt")], check=True)
    assert connect(tmp_path / "wt", "--config", str(config), "--name", "b", env=env).returncode == 0
    assert set(local_entries(home, project)) == {"x", "pocolobby", "b"}

    # Claude Code's own lock on the file (`.claude.json.lock`, a directory): a stale one is
    # taken over, a live one waited for; ours is gone afterwards.
    lock = home / ".claude.json.lock"
    lock.mkdir()
    os.utime(lock, (time.time() - 60, time.time() - 60))
    assert connect(project, "--config", str(config), "--name", "c", env=env).returncode == 0
    assert not lock.exists() and "c" in local_entries(home, project)
    lock.mkdir()
    released = threading.Timer(1.0, lock.rmdir)
    released.start()
    started = time.monotonic()
    waited = connect(project, "--config", str(config), "--name", "d", env=env)
    assert waited.returncode == 0 and time.monotonic() - started > 1.0, waited.stderr
    assert "d" in local_entries(home, project)

    broken = tmp_path / "broken"
    (broken / ".claude.json").parent.mkdir()
    (broken / ".claude.json").write_text('{"projects": [')
    refused = connect(project, "--config", str(config), env={"HOME": str(broken)})
    assert refused.returncode == 1 and "not valid JSON" in refused.stderr
    assert (broken / ".claude.json").read_text() == '{"projects": ['


def test_connect_with_scope_project_adds_the_bridge_to_mcp_json_keeping_other_servers(
    tmp_path: Path,
):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    config = agent_file(home)
    other = {"command": "npx", "args": ["some-server"], "env": {"A": "1"}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": other}, "x": 1}))

    result = connect(project, "--config", str(config), "--scope", "project")
    assert result.returncode == 0, result.stderr
    assert "claude --dangerously-load-development-channels server:pocolobby" in result.stdout
    assert "usual flags" in result.stdout and "added mcpServers.pocolobby" in result.stdout
    data = json.loads((project / ".mcp.json").read_text())
    assert data["x"] == 1 and data["mcpServers"]["other"] == other
    entry = data["mcpServers"]["pocolobby"]
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-3:] == ["bridge", "--config", str(config.resolve())]

    again = connect(project, "--config", str(config), "--scope", "project")
    assert again.returncode == 0 and "kept mcpServers.pocolobby" in again.stdout
    named = connect(project, "--config", str(config), "--name", "lobby-b", "--scope", "project")
    assert "server:lobby-b" in named.stdout
    assert set(json.loads((project / ".mcp.json").read_text())["mcpServers"]) == {
        "other",
        "pocolobby",
        "lobby-b",
    }


def test_connect_refuses_what_it_cannot_use_and_leaves_the_file_alone(tmp_path: Path):
    config = agent_file(tmp_path)
    broken = '{"mcpServers": {'
    (tmp_path / ".mcp.json").write_text(broken)
    result = connect(tmp_path, "--config", str(config), "--scope", "project")
    assert result.returncode == 1 and "not valid JSON" in result.stderr
    assert (tmp_path / ".mcp.json").read_text() == broken

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    missing = connect(fresh, "--config", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "no agent configuration" in missing.stderr
    bad_name = connect(fresh, "--config", str(config), "--name", "has space")
    assert bad_name.returncode == 1 and "--name" in bad_name.stderr
    assert not (fresh / ".mcp.json").exists() and not (fresh / ".home").exists()

    inside = connect(tmp_path / "fresh", "--config", str(agent_file(fresh, "inside.json")))
    assert inside.returncode == 0 and "keep it out of version control" in inside.stdout


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_written_entry_starts_a_working_bridge(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("connected", ["beta"], tmp_path / "configs")
    project = tmp_path / "project"
    project.mkdir()
    result = connect(project, "--config", str(configs["beta"].path))
    assert result.returncode == 0, result.stderr
    entry = local_entries(project / ".home", project)["pocolobby"]
    host = Host(
        configs["beta"].path,
        str(uuid.uuid4()),
        tmp_path / "bridge.log",
        command=[entry["command"], *entry["args"]],
    )
    await host.start()
    try:
        _, context = await host.bootstrapped()
        assert context["bridge"]["agent_id"] == "beta"
    finally:
        assert await host.close() == 0


CODEX_CONFIG = """# my Codex settings
model = "gpt-5-codex"

[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-server"]

[mcp_servers.docs.env]
API_KEY = "k"

[profiles.fast]
model = "o4-mini"
"""


def test_connect_for_codex_adds_its_table_keeps_everything_else_and_prints_the_tmux_launch(
    tmp_path: Path,
):
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(CODEX_CONFIG)
    config = agent_file(tmp_path)
    env = {"CODEX_HOME": str(codex_home)}

    result = connect(tmp_path, "--config", str(config), "--host", "codex", env=env)
    assert result.returncode == 0, result.stderr
    assert "added [mcp_servers.pocolobby]" in result.stdout
    assert (
        f"tmux new-session -s beta env CODEX_HOME={codex_home} codex --no-daemon" in result.stdout
    )
    text = (codex_home / "config.toml").read_text()
    assert text.startswith(CODEX_CONFIG.rstrip())  # comments and layout kept byte for byte
    data = tomllib.loads(text)
    before = tomllib.loads(CODEX_CONFIG)
    assert data["model"] == before["model"] and data["profiles"] == before["profiles"]
    assert data["mcp_servers"]["docs"] == before["mcp_servers"]["docs"]
    entry = data["mcp_servers"]["pocolobby"]
    # Codex's documented stdio shape: command, args, and env_vars passed through its cleared
    # environment (the bridge finds its pane from TMUX and TMUX_PANE).
    assert set(entry) == {"command", "args", "env_vars"}
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-5:] == ["bridge", "--config", str(config.resolve()), "--deliver", "tmux"]
    assert entry["env_vars"] == ["TMUX", "TMUX_PANE"]

    again = connect(tmp_path, "--config", str(config), "--host", "codex", env=env)
    assert again.returncode == 0 and "kept [mcp_servers.pocolobby]" in again.stdout
    assert (codex_home / "config.toml").read_text() == text
    other = agent_file(tmp_path, "other.json")
    refused = connect(tmp_path, "--config", str(other), "--host", "codex", env=env)
    assert refused.returncode == 1
    assert f"runs the bridge for another agent ({config.resolve()})" in refused.stderr
    assert "Nothing was written" in refused.stderr
    assert (codex_home / "config.toml").read_text() == text
    moved = connect(tmp_path, "--config", str(other), "--host", "codex", "--replace", env=env)
    assert "updated [mcp_servers.pocolobby]" in moved.stdout
    data = tomllib.loads((codex_home / "config.toml").read_text())
    assert data["mcp_servers"]["pocolobby"]["args"][2] == str(other.resolve())
    assert data["mcp_servers"]["docs"] == before["mcp_servers"]["docs"]


def test_connect_for_codex_creates_the_file_and_refuses_what_it_cannot_edit(tmp_path: Path):
    config = agent_file(tmp_path)
    fresh = tmp_path / "fresh-home"
    made = connect(
        tmp_path, "--config", str(config), "--host", "codex", env={"CODEX_HOME": str(fresh)}
    )
    assert made.returncode == 0, made.stderr
    assert tomllib.loads((fresh / "config.toml").read_text())["mcp_servers"]["pocolobby"]

    for broken, said in [
        ('model = "x\n', "not valid TOML"),
        ('[mcp_servers]\npocolobby = { command = "old" }\n', "in a form this command"),
        ('mcp_servers.pocolobby.command = "old"\n', "in a form this command"),
    ]:
        home = tmp_path / f"home-{len(said)}-{len(broken)}"
        home.mkdir()
        (home / "config.toml").write_text(broken)
        refused = connect(
            tmp_path, "--config", str(config), "--host", "codex", env={"CODEX_HOME": str(home)}
        )
        assert refused.returncode == 1 and said in refused.stderr, refused.stderr
        assert (home / "config.toml").read_text() == broken

    channel = connect(tmp_path, "--config", str(config), "--host", "codex", "--deliver", "channel")
    assert channel.returncode == 1 and "needs --deliver tmux" in channel.stderr


def test_connect_for_claude_code_with_tmux_delivery_names_it_in_the_entry(tmp_path: Path):
    config = agent_file(tmp_path / "..", "tmux-beta.json")
    result = connect(tmp_path, "--config", str(config), "--deliver", "tmux")
    assert result.returncode == 0, result.stderr
    entry = local_entries(tmp_path / ".home", tmp_path)["pocolobby"]
    assert entry["args"][-2:] == ["--deliver", "tmux"]
    assert "inside it" in result.stdout and "dangerously-load-development-channels" not in (
        result.stdout
    )


def test_connect_for_gemini_merges_its_entry_into_the_projects_settings(tmp_path: Path):
    project = tmp_path / "project"
    (project / ".gemini").mkdir(parents=True)
    settings = project / ".gemini" / "settings.json"
    other = {"command": "npx", "args": ["docs-server"], "trust": True}
    settings.write_text(json.dumps({"ui": {"theme": "GitHub"}, "mcpServers": {"docs": other}}))
    config = agent_file(tmp_path)

    result = connect(project, "--config", str(config), "--host", "gemini")
    assert result.returncode == 0, result.stderr
    assert "added mcpServers.pocolobby" in result.stdout
    assert "tmux new-session -s beta gemini" in result.stdout and "trusted folder" in result.stdout
    data = json.loads(settings.read_text())
    assert data["ui"] == {"theme": "GitHub"} and data["mcpServers"]["docs"] == other
    entry = data["mcpServers"]["pocolobby"]
    assert set(entry) == {"command", "args", "timeout"} and Path(entry["command"]).is_absolute()
    assert entry["timeout"] == 600_000  # Gemini CLI's default, so `mcp list` waits as long
    assert entry["args"][-5:] == ["bridge", "--config", str(config.resolve()), "--deliver", "tmux"]
    again = connect(project, "--config", str(config), "--host", "gemini")
    assert "kept mcpServers.pocolobby" in again.stdout
    data["mcpServers"]["pocolobby"]["trust"] = True  # the owner's own setting
    settings.write_text(json.dumps(data))
    moved = connect(project, "--config", str(agent_file(tmp_path, "b2.json")), "--host", "gemini")
    assert "updated mcpServers.pocolobby" in moved.stdout
    entry = json.loads(settings.read_text())["mcpServers"]["pocolobby"]
    assert entry["trust"] is True and entry["args"][2] == str((tmp_path / "b2.json").resolve())

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made = connect(fresh, "--config", str(config), "--host", "gemini")
    assert made.returncode == 0, made.stderr
    assert json.loads((fresh / ".gemini" / "settings.json").read_text())["mcpServers"]
    channel = connect(fresh, "--config", str(config), "--host", "gemini", "--deliver", "channel")
    assert channel.returncode == 1 and "--host gemini needs --deliver tmux" in channel.stderr
    (fresh / ".gemini" / "settings.json").write_text("{ // a comment\n}")
    broken = connect(fresh, "--config", str(config), "--host", "gemini")
    assert broken.returncode == 1 and "is not valid JSON" in broken.stderr
    assert (fresh / ".gemini" / "settings.json").read_text() == "{ // a comment\n}"


def test_gemini_cli_lists_the_entry_connect_wrote_as_connected(tmp_path: Path):
    gemini = npm_host("gemini")
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    config = agent_file(home)
    assert connect(project, "--config", str(config), "--host", "gemini").returncode == 0
    # Offline: no credentials, a HOME of its own; the workspace trusted as the trust dialog
    # would, so Gemini CLI starts the project's servers.
    env = {"HOME": str(home), "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_BROWSER": "true"}
    listed = re.compile(r"pocolobby: \S+ bridge --config \S+beta\.json --deliver tmux \(stdio\)")
    done = subprocess.run(
        [str(gemini), "mcp", "list"],
        cwd=project, env=clean_env(env), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and re.search(listed.pattern + " - Connected", out), out


def test_connect_sets_claude_codes_status_line_and_hooks_once_keeping_the_rest(
    tmp_path: Path,
):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    local = project / ".claude" / "settings.local.json"
    theirs = {"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"}]}
    local.write_text(
        json.dumps({"permissions": {"allow": ["Bash(ls)"]}, "hooks": {"Stop": [theirs]}})
    )
    config = agent_file(tmp_path)

    for _ in range(2):
        done = connect(project, "--config", str(config))
        assert done.returncode == 0, done.stderr
    assert "set the status line (plan usage); set the UserPromptSubmit" in done.stdout
    settings = json.loads(local.read_text())
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert "enabledMcpjsonServers" not in settings  # a local-scope server needs no approval
    assert settings["statusLine"]["command"].endswith(f"statusline --config {config}")
    hook = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert (
        hook.endswith(f"hook --config {config}") and len(settings["hooks"]["UserPromptSubmit"]) == 1
    )
    assert settings["hooks"]["Stop"][0] == theirs and len(settings["hooks"]["Stop"]) == 2

    # Another agent's configuration in the same project: refused unless told, then it
    # replaces ours, never adds a second.
    other = agent_file(tmp_path, "other.json")
    refused = connect(project, "--config", str(other))
    assert refused.returncode == 1 and "Nothing was written" in refused.stderr
    assert f"runs the bridge for another agent ({config.resolve()})" in refused.stderr
    assert "CLAUDE_CONFIG_DIR=~/.claude-beta pocolobby connect" in refused.stderr
    assert json.loads(local.read_text()) == settings
    assert connect(project, "--config", str(other), "--replace").returncode == 0
    settings = json.loads(local.read_text())
    assert [g["hooks"][0]["command"].split()[-1] for g in settings["hooks"]["Stop"]] == [
        "done",
        str(other),
    ]

    # --scope project: the shared .mcp.json, approved in the same file; the hooks stay single.
    shared = connect(project, "--config", str(other), "--scope", "project")
    assert "approved pocolobby; set the status line" in shared.stdout
    assert "Claude Code's local scope" in shared.stdout and "runs that one instead" in shared.stdout
    settings = json.loads(local.read_text())
    assert (
        settings["enabledMcpjsonServers"] == ["pocolobby"] and len(settings["hooks"]["Stop"]) == 2
    )


def test_connect_keeps_someone_elses_status_line_and_no_hooks_skips_them(tmp_path: Path):
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    local = project / ".claude" / "settings.local.json"
    local.write_text(json.dumps({"statusLine": {"type": "command", "command": "my-line"}}))
    done = connect(project, "--config", str(agent_file(tmp_path)))
    assert "kept your own status line" in done.stdout
    assert json.loads(local.read_text())["statusLine"]["command"] == "my-line"

    bare = tmp_path / "bare"
    bare.mkdir()
    skipped = connect(bare, "--config", str(agent_file(tmp_path)), "--no-hooks")
    assert skipped.returncode == 0, skipped.stderr
    assert not (bare / ".claude").exists()  # nothing to approve, nothing to report
    shared = connect(
        bare, "--config", str(agent_file(tmp_path)), "--no-hooks", "--scope", "project"
    )
    assert shared.returncode == 0, shared.stderr
    settings = json.loads((bare / ".claude" / "settings.local.json").read_text())
    assert settings == {"enabledMcpjsonServers": ["pocolobby"]}


@pytest.mark.parametrize("scope", ["local", "project"])
def test_claude_mcp_list_shows_the_connected_server_with_no_approval_prompt(
    tmp_path: Path, scope: str
):
    claude = claude_executable()
    if claude is None:
        if os.environ.get("POCOLOBBY_REQUIRE_CLAUDE_CODE") == "1":
            raise RuntimeError("POCOLOBBY_REQUIRE_CLAUDE_CODE=1 but Claude Code is missing")
        pytest.skip("real Claude Code is not installed (POCOLOBBY_CLAUDE)")
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    # A repository, as projects are: outside one Claude Code reads the project's settings only
    # once its folder is trusted (the first launch asks), and connect says so.
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    config = agent_file(home)
    env = {"HOME": str(home)}
    assert connect(project, "--config", str(config), "--scope", scope, env=env).returncode == 0
    listed = subprocess.run(
        [claude, "mcp", "list"],
        cwd=project,
        env=clean_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    line = next(x for x in listed.stdout.splitlines() if x.startswith("pocolobby:"))
    assert "Connected" in line and "Pending approval" not in line, listed.stdout
    assert f"--config {config.resolve()}" in line
    assert (project / ".mcp.json").exists() == (scope == "project")


def test_two_codex_agents_on_one_machine_each_keep_their_own_codex_home(tmp_path: Path):
    first, second = agent_file(tmp_path, "first.json"), agent_file(tmp_path, "second.json")
    homes = {name: tmp_path / f"codex-{name}" for name in ("first", "second")}
    for name, config in (("first", first), ("second", second)):
        done = connect(
            tmp_path, "--config", str(config), "--host", "codex",
            env={"CODEX_HOME": str(homes[name])},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"env CODEX_HOME={homes[name]} codex --no-daemon" in done.stdout
    for name, config in (("first", first), ("second", second)):
        data = tomllib.loads((homes[name] / "config.toml").read_text())
        assert data["mcp_servers"]["pocolobby"]["args"][2] == str(config.resolve())


def test_codex_mcp_list_shows_each_of_two_agents_its_own_entry(tmp_path: Path):
    """Two Codex agents in two projects, each under the Codex home connect's refusal names
    (`CODEX_HOME=~/.codex-AGENT`): real Codex, run as the printed launch command sets it, lists
    its own agent's bridge and not the other's."""
    codex = npm_host("codex")
    home = tmp_path / "home"
    home.mkdir()
    configs = {name: agent_file(home, f"{name}.json") for name in ("first", "second")}
    for name, config in configs.items():
        project = tmp_path / f"project-{name}"
        project.mkdir()
        env = {"HOME": str(home), "CODEX_HOME": str(home / f".codex-{name}")}
        done = connect(project, "--config", str(config), "--host", "codex", env=env)
        assert done.returncode == 0, done.stderr
        assert f"env CODEX_HOME={home / f'.codex-{name}'} codex --no-daemon" in done.stdout
    for name, config in configs.items():
        listed = subprocess.run(
            [str(codex), "mcp", "list"],
            cwd=tmp_path / f"project-{name}",
            env=clean_env({"HOME": str(home), "CODEX_HOME": str(home / f".codex-{name}")}),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines() if line.startswith("pocolobby")]
        assert len(rows) == 1, listed.stdout
        assert rows[0][rows[0].index("--config") + 1] == str(config.resolve()), listed.stdout
        assert "enabled" in rows[0], listed.stdout
