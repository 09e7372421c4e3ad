"""`pocolobby doctor`: the real CLI on a machine of its own (a temporary HOME, the project, a
stand-in host program on PATH) against a real broker subprocess: every check passes on a
setup made with `agent add --config` and `connect` (Claude Code's entry in either scope), and
each broken link fails on its own line with its fix."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.board.notifications.webpush_service import PushService
from tests.bridge_client import Bridge
from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow

# Variables by which the hosts' files would be looked for outside the temporary HOME.
_ELSEWHERE = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "POCOLOBBY_CONFIG")


@dataclass
class Machine:
    """An agent's machine: its HOME, a bin folder first on PATH, and a project."""

    home: Path
    bin: Path
    project: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, broker: Broker | None = None) -> dict[str, str]:
        base = broker.cli_env() if broker is not None else clean_env()
        env = {name: value for name, value in base.items() if name not in _ELSEWHERE}
        env.update(
            HOME=str(self.home),
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            PYTHONPATH=str(REPO_ROOT),
        )
        return {**env, **self.extra_env}

    def run(
        self, broker: Broker | None, *args: str, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pocolobby", *args],
            cwd=cwd or self.project,
            env=self.env(broker),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def doctor(self, broker: Broker | None, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(broker, "doctor", *args)

    def host_program(self, name: str, version: str) -> None:
        """A stand-in for a host's executable that answers `--version` as the real one."""
        program = self.bin / name
        program.write_text(f"#!/bin/sh\necho '{version}'\n")
        program.chmod(0o755)


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    home, project = tmp_path / "home", tmp_path / "home" / "project"
    project.mkdir(parents=True)
    (home / "bin").mkdir()
    found = Machine(home, home / "bin", project)
    found.host_program("claude", "2.1.197 (Claude Code)")
    return found


def set_up(broker: Broker, machine: Machine, lobby: str, name: str = "backend") -> Path:
    """The documented setup: `agent add --config` on the broker's side, `connect` in the
    project; the agent's configuration path."""
    config = machine.home / ".pocolobby" / f"{name}.json"
    config.parent.mkdir(exist_ok=True)
    broker.cli_ok("lobby", "create", lobby)
    broker.cli_ok("agent", "add", lobby, name, "--config", str(config))
    connected = machine.run(broker, "connect", "--config", str(config))
    assert connected.returncode == 0, connected.stderr
    return config


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stdout.splitlines()


def line(result: subprocess.CompletedProcess[str], start: str) -> str:
    """The one line starting with `start`, and its fix when the next line is one."""
    found = lines(result)
    (index,) = [i for i, text in enumerate(found) if text.startswith(start)]
    after = found[index + 1] if index + 1 < len(found) else ""
    return found[index] + ("\n" + after if after.lstrip().startswith("fix:") else "")


def failed(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [text for text in lines(result) if text.startswith("FAIL")]


def merge_json(path: Path, values: dict) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**data, **values}))


def hand_written_reports(machine: Machine, config: Path) -> None:
    """The status line and hooks for the agent as docs/AGENTS.md shows them (by hand, in
    place of those connect wrote)."""
    command = f"pocolobby hook --config {config}"
    hooks = [{"hooks": [{"type": "command", "command": command}]}]
    settings = {
        "statusLine": {"type": "command", "command": f"pocolobby statusline --config {config}"},
        "hooks": {"UserPromptSubmit": hooks, "Stop": hooks},
    }
    merge_json(machine.project / ".claude" / "settings.local.json", settings)


def test_a_healthy_setup_passes_and_claims_nothing(module_broker: Broker, machine: Machine):
    config = set_up(module_broker, machine, "healthy")
    fresh = machine.doctor(module_broker, "--config", str(config))
    assert fresh.returncode == 0 and failed(fresh) == [], fresh.stdout + fresh.stderr
    # connect did it all: the local-scope entry needs no approval, the reports are set.
    assert [text for text in lines(fresh) if text.startswith("warn")] == [], fresh.stdout

    # The shared .mcp.json instead (--scope project): pending until approved, and said how.
    shared = machine.home / "shared"
    shared.mkdir()
    done = machine.run(module_broker, "connect", "--config", str(config), "--scope", "project",
                       cwd=shared)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = machine.doctor(module_broker, "--dir", str(shared))
    assert f"pocolobby in {shared / '.mcp.json'} runs the bridge" in listed.stdout
    assert listed.returncode == 0 and [t for t in lines(listed) if t.startswith("warn")] == []
    (shared / ".claude" / "settings.local.json").unlink()
    pending = machine.doctor(module_broker, "--dir", str(shared))
    assert "server pocolobby is not approved yet" in line(pending, "warn claude: the project")

    # With the status line and hooks written by hand as the docs show them: no warning.
    hand_written_reports(machine, config)
    result = machine.doctor(module_broker, "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [text for text in lines(result) if text.startswith(("FAIL", "warn"))] == []
    assert line(result, "ok   config:").endswith(f"{config}: backend in lobby healthy, mode 0600")
    assert f"{module_broker.url} answers" in line(result, "ok   broker:")
    assert "accepted: backend in lobby healthy, enabled" in line(result, "ok   token:")
    assert "not paused" in line(result, "ok   lobby:")
    state = machine.home / ".claude.json"
    assert f"pocolobby in {state} (local scope) runs the bridge with it" in result.stdout
    assert "ok   claude: Claude Code 2.1.197" in result.stdout
    assert "status line reports plan usage" in result.stdout
    assert "UserPromptSubmit and Stop hooks report" in result.stdout
    assert lines(result)[-1] == "every check passed"

    # In the project, the configuration is the one its MCP entry runs the bridge with.
    found = machine.doctor(module_broker)
    assert found.returncode == 0 and str(config) in line(found, "ok   config:")

    # The token was read without a runtime: the agent is still unclaimed.
    assert bound(module_broker, "healthy") == {
        "runtime_id": None,
        "runtime_generation": 0,
        "runtime_bound_at": None,
    }


def test_beside_a_live_session_doctor_disturbs_nothing(module_broker: Broker, machine: Machine):
    config = set_up(module_broker, machine, "live")
    token = json.loads(config.read_text())["token"]

    async def beside_a_session() -> tuple[subprocess.CompletedProcess[str], dict, dict]:
        async with await Bridge.connect(module_broker.url, token) as session:
            await session.bootstrapped()
            before = bound(module_broker, "live")
            result = await asyncio.to_thread(machine.doctor, module_broker)
            await session.roundtrip()  # the session's stream is still served
            return result, before, bound(module_broker, "live")

    result, before, after = asyncio.run(beside_a_session())
    assert result.returncode == 0, result.stdout
    assert "enabled; a session holds the agent now" in line(result, "ok   token:")
    assert after == before and before["runtime_generation"] == 1


def bound(broker: Broker, lobby: str) -> dict:
    """The agent's runtime binding as the operator sees it."""
    (agent,) = json.loads(broker.cli_ok("agent", "list", lobby, "--json").stdout)["agents"]
    return {key: agent[key] for key in ("runtime_id", "runtime_generation", "runtime_bound_at")}


def test_a_stopped_broker_fails_on_its_line_with_the_url(broker: Broker, machine: Machine):
    config = set_up(broker, machine, "stopped")
    broker.stop()
    result = machine.doctor(broker, "--config", str(config))
    assert result.returncode == 1
    assert len(failed(result)) == 1
    stopped = line(result, "FAIL broker:")
    assert stopped.startswith(f"FAIL broker: the broker was not reached at {broker.url} (Connect")
    assert "fix: start it (`pocolobby serve` on its machine)" in stopped
    assert line(result, "--   token:") == "--   token: not checked: the broker check failed"
    assert line(result, "ok   config:") and "runs the bridge with it" in result.stdout


def test_a_rotated_token_fails_with_the_rotate_fix(module_broker: Broker, machine: Machine):
    config = set_up(module_broker, machine, "rotated")
    module_broker.cli_ok("agent", "rotate", "rotated", "backend", "--config", str(config) + ".new")
    result = machine.doctor(module_broker, "--config", str(config))
    assert result.returncode == 1 and len(failed(result)) == 1
    refused = line(result, "FAIL token:")
    assert "the broker refused the token (401 token_revoked:" in refused
    assert "pocolobby agent rotate rotated backend --config FILE" in refused
    assert line(result, "ok   broker:")


def test_a_disabled_agent_and_a_paused_lobby_fail_with_the_owner_s_command(
    module_broker: Broker, machine: Machine
):
    config = set_up(module_broker, machine, "paused")
    module_broker.cli_ok("lobby", "pause", "paused")
    result = machine.doctor(module_broker, "--config", str(config))
    assert result.returncode == 1 and len(failed(result)) == 1
    assert "fix: the owner resumes it: pocolobby lobby resume paused" in line(result, "FAIL lobby:")

    module_broker.cli_ok("agent", "disable", "paused", "backend")
    result = machine.doctor(module_broker, "--config", str(config))
    assert result.returncode == 1 and len(failed(result)) == 1
    refused = line(result, "FAIL token:")
    assert "(403 agent_disabled:" in refused
    assert "fix: the owner enables it: pocolobby agent enable paused backend" in refused


def test_a_config_others_may_read_fails_with_chmod(module_broker: Broker, machine: Machine):
    config = set_up(module_broker, machine, "loose")
    config.chmod(0o644)
    result = machine.doctor(module_broker, "--config", str(config))
    assert result.returncode == 1 and len(failed(result)) == 1
    loose = line(result, "FAIL config:")
    assert "other users may read it (mode 0644)" in loose
    assert loose.endswith(f"fix: chmod 600 {config}")
    assert line(result, "ok   token:")  # the rest is still checked


def test_no_host_setup_fails_with_the_connect_command(module_broker: Broker, machine: Machine):
    config = set_up(module_broker, machine, "elsewhere")
    other = machine.home / "other-project"
    other.mkdir()
    result = machine.doctor(module_broker, "--config", str(config), "--dir", str(other))
    assert result.returncode == 1 and len(failed(result)) == 1
    missing = line(result, "FAIL host:")
    assert f"no host in {other} runs the bridge with {config}: nothing is set up here" in missing
    assert f"fix: in {other}: pocolobby connect --config {config}" in missing

    # Without --config, in a directory where nothing is connected: nothing to check.
    lost = machine.run(module_broker, "doctor", cwd=other)
    assert lost.returncode == 1
    assert "FAIL config: no agent configuration" in lost.stdout
    assert "--   broker: not checked: no configuration" in lost.stdout


def test_what_the_bridge_refuses_fails_before_anything_is_sent(machine: Machine):
    """No broker at all: a remote plain-http url, a file that is not a configuration, an
    entry whose program is gone, a Claude Code without channels."""
    config = machine.home / "remote.json"
    config.write_text(
        json.dumps({"url": "http://192.0.2.7:8787", "token": "plt_x", "lobby": "t", "agent": "a"})
    )
    config.chmod(0o600)
    assert machine.run(None, "connect", "--config", str(config)).returncode == 1  # refused
    entry = {"command": "/gone/pocolobby", "args": ["bridge", "--config", str(config)]}
    (machine.project / ".mcp.json").write_text(json.dumps({"mcpServers": {"team": entry}}))
    machine.host_program("claude", "2.1.79 (Claude Code)")
    codex_toml = machine.home / ".codex" / "config.toml"
    codex_toml.parent.mkdir()
    codex_toml.write_text("[mcp_servers.x\n")

    result = machine.doctor(None)
    assert result.returncode == 1
    assert "url http://192.0.2.7:8787 is plain http to another machine" in line(
        result, "FAIL broker:"
    )
    assert "--   token: not checked" in result.stdout
    assert "runs /gone/pocolobby, which is not there" in line(result, "FAIL claude: Claude Code:")
    assert "Claude Code 2.1.79 is older than 2.1.80" in line(result, "FAIL claude: Claude Code 2")
    # What feeds the dashboard is missing: warned, with the command that sets it up.
    connect = f"fix: in {machine.project}: pocolobby connect --config {config} --host claude"
    assert connect in line(result, "warn claude: no status line reports this agent's")
    assert connect in line(result, "warn claude: no UserPromptSubmit and no Stop hook")
    assert "server team is not approved yet" in line(result, "warn claude: the project server")
    assert f"warn host: {codex_toml} is not valid TOML" in result.stdout

    config.write_text("{}")
    broken = machine.doctor(None, "--config", str(config))
    assert "has no string 'url'" in line(broken, "FAIL config:")
    assert "--   broker: not checked: the configuration is not usable" in broken.stdout


def test_an_untrusted_certificate_fails_as_tls(machine: Machine):
    """A loopback https stand-in whose certificate this machine does not trust; trusted, it
    answers, but not as a broker."""
    with PushService() as stand_in:
        config = machine.home / "tls.json"
        config.write_text(
            json.dumps({"url": stand_in.origin, "token": "plt_x", "lobby": "t", "agent": "a"})
        )
        config.chmod(0o600)
        untrusted = machine.doctor(None, "--config", str(config))
        tls = line(untrusted, "FAIL broker:")
        assert f"{stand_in.origin}: the TLS connection failed (ConnectError: " in tls
        assert "CERTIFICATE_VERIFY_FAILED" in tls and "SSL_CERT_FILE" in tls

        machine.extra_env["SSL_CERT_FILE"] = str(stand_in.ca)
        trusted = machine.doctor(None, "--config", str(config))
    assert "answers (HTTP 501), but not as a PocoLobby broker" in line(trusted, "FAIL broker:")


def test_codex_and_gemini_entries_are_found(module_broker: Broker, machine: Machine):
    config = set_up(module_broker, machine, "hosts")
    state = json.loads((machine.home / ".claude.json").read_text())
    del state["projects"][str(machine.project)]  # no Claude Code entry here
    (machine.home / ".claude.json").write_text(json.dumps(state))
    machine.host_program("codex", "codex-cli 0.171.0")
    machine.host_program("gemini", "0.61.0")
    for host in ("codex", "gemini"):
        done = machine.run(module_broker, "connect", "--config", str(config), "--host", host)
        assert done.returncode == 0, done.stderr
    result = machine.doctor(module_broker)
    assert result.returncode == 0, result.stdout
    codex_toml = machine.home / ".codex" / "config.toml"
    gemini_json = machine.project / ".gemini" / "settings.json"
    assert f"ok   codex: Codex CLI: pocolobby in {codex_toml} runs the bridge" in result.stdout
    assert f"ok   gemini: Gemini CLI: pocolobby in {gemini_json} runs the bridge" in result.stdout
    assert line(result, "ok   codex: codex on PATH") and line(result, "ok   tmux: tmux on PATH")


def test_doctor_loads_no_django(machine: Machine):
    probe = (
        "import sys; from pocolobby.cli import main; main(['doctor']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'channels', 'console', 'board')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=machine.project,
        env=machine.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr
