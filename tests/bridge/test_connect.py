"""`pocolobby connect`: the project's `.mcp.json` entry and the launch command, run as the real
CLI; and a bridge started from exactly the command that entry names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from tests.bridge.claude_code import claude_executable
from tests.bridge.host import Host
from tests.bridge.npm_hosts import npm_host
from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)


def connect(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "connect", *args],
        cwd=project,
        env=clean_env({"PYTHONPATH": str(REPO_ROOT), **(env or {})}),
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


def test_connect_adds_the_bridge_keeps_other_servers_and_prints_the_launch_command(
    tmp_path: Path,
):
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    config = agent_file(home)
    other = {"command": "npx", "args": ["some-server"], "env": {"A": "1"}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": other}, "x": 1}))

    result = connect(project, "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "claude --dangerously-load-development-channels server:pocolobby" in result.stdout
    assert "usual flags" in result.stdout and "added mcpServers.pocolobby" in result.stdout
    data = json.loads((project / ".mcp.json").read_text())
    assert data["x"] == 1 and data["mcpServers"]["other"] == other
    entry = data["mcpServers"]["pocolobby"]
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-3:] == ["bridge", "--config", str(config.resolve())]

    again = connect(project, "--config", str(config))
    assert again.returncode == 0 and "kept mcpServers.pocolobby" in again.stdout
    named = connect(project, "--config", str(config), "--name", "lobby-b")
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
    result = connect(tmp_path, "--config", str(config))
    assert result.returncode == 1 and "not valid JSON" in result.stderr
    assert (tmp_path / ".mcp.json").read_text() == broken

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    missing = connect(fresh, "--config", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "no agent configuration" in missing.stderr
    bad_name = connect(fresh, "--config", str(config), "--name", "has space")
    assert bad_name.returncode == 1 and "--name" in bad_name.stderr
    assert not (fresh / ".mcp.json").exists()

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
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["pocolobby"]
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
    entry = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["pocolobby"]
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


def test_connect_sets_claude_codes_approval_status_line_and_hooks_once_keeping_the_rest(
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
    assert (
        "approved pocolobby; set the status line (plan usage); set the UserPromptSubmit"
        in done.stdout
    )
    settings = json.loads(local.read_text())
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert settings["enabledMcpjsonServers"] == ["pocolobby"]
    assert settings["statusLine"]["command"].endswith(f"statusline --config {config}")
    hook = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert (
        hook.endswith(f"hook --config {config}") and len(settings["hooks"]["UserPromptSubmit"]) == 1
    )
    assert settings["hooks"]["Stop"][0] == theirs and len(settings["hooks"]["Stop"]) == 2

    # Another agent's configuration in the same project replaces ours, never adds a second.
    other = agent_file(tmp_path, "other.json")
    assert connect(project, "--config", str(other)).returncode == 0
    settings = json.loads(local.read_text())
    assert [g["hooks"][0]["command"].split()[-1] for g in settings["hooks"]["Stop"]] == [
        "done",
        str(other),
    ]


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
    settings = json.loads((bare / ".claude" / "settings.local.json").read_text())
    assert settings == {"enabledMcpjsonServers": ["pocolobby"]}


def test_claude_mcp_list_shows_the_connected_server_with_no_approval_prompt(tmp_path: Path):
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
    assert connect(project, "--config", str(config), env={"HOME": str(home)}).returncode == 0
    listed = subprocess.run(
        [claude, "mcp", "list"],
        cwd=project,
        env=clean_env({"HOME": str(home)}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    line = next(x for x in listed.stdout.splitlines() if x.startswith("pocolobby:"))
    assert "Connected" in line and "Pending approval" not in line, listed.stdout


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
