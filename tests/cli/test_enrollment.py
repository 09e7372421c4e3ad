"""Enrolment by code: `agent add --enroll` / `agent enroll` on the broker's side, `pocolobby
join CODE` on the agent's machine (a fresh HOME), against a real broker subprocess."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import stat
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.bridge.claude_code import claude_executable
from tests.server import Broker, BrokerFactory, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow

CODE = re.compile(r"pocolobby join (\S+@\S+)")


def issued_code(result_stdout: str) -> str:
    found = CODE.search(result_stdout)
    assert found, result_stdout
    return found.group(1)


def agent_machine(tmp_path: Path, name: str) -> dict[str, str]:
    """A second machine's worth of HOME: its own config directory, nothing else."""
    home = tmp_path / f"home-{name}"
    (home / "project").mkdir(parents=True)
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def join(broker: Broker, env: dict[str, str], *args: str):
    home = Path(env["HOME"])
    # The agent's machine knows neither the broker's data directory nor its admin token.
    return broker.cli("join", *args, env={**env, "POCOLOBBY_DATA_DIR": str(home / "nothing")},
                      cwd=home / "project")  # fmt: skip


def test_an_agent_added_with_enroll_joins_with_one_command_and_can_send(
    module_broker: Broker, tmp_path: Path
):
    module_broker.cli_ok("lobby", "create", "enrol-team")
    added = module_broker.cli_ok("agent", "add", "enrol-team", "backend", "--enroll")
    assert "added backend to enrol-team" in added.stdout
    code = issued_code(added.stdout)
    assert code.endswith(f"@{module_broker.url}")

    env = agent_machine(tmp_path, "backend")
    joined = join(module_broker, env, code, "--host", "shell")
    assert joined.returncode == 0, joined.stderr
    config = Path(env["XDG_CONFIG_HOME"]) / "pocolobby" / "enrol-team-backend.json"
    assert f"configuration is in {config}" in joined.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    data = json.loads(config.read_text())
    assert data["url"] == module_broker.url and data["lobby"] == "enrol-team"
    assert data["agent"] == "backend" and data["token"].startswith("plt_")

    sent = module_broker.cli(
        "msg", "send", "--config", str(config), "backend", "a note to myself", "--json"
    )
    assert sent.returncode == 0, sent.stderr

    again = join(module_broker, agent_machine(tmp_path, "thief"), code, "--host", "shell")
    assert again.returncode == 1
    assert "refused (409 code_used)" in again.stderr and "nothing was written" in again.stderr
    assert not (tmp_path / "home-thief" / ".config" / "pocolobby").exists() or not list(
        (tmp_path / "home-thief" / ".config" / "pocolobby").iterdir()
    )


def test_join_sets_the_host_up_in_the_project_as_connect_does(
    module_broker: Broker, tmp_path: Path
):
    module_broker.cli_ok("lobby", "create", "enrol-claude")
    code = issued_code(
        module_broker.cli_ok("agent", "add", "enrol-claude", "lead", "--enroll").stdout
    )
    env = agent_machine(tmp_path, "lead")
    joined = join(module_broker, env, code)
    assert joined.returncode == 0, joined.stderr
    # Claude Code's local scope for the project, in this machine's own ~/.claude.json.
    state = json.loads((Path(env["HOME"]) / ".claude.json").read_text())
    entry = state["projects"][str(Path(env["HOME"]) / "project")]["mcpServers"]["pocolobby"]
    config = Path(env["XDG_CONFIG_HOME"]) / "pocolobby" / "enrol-claude-lead.json"
    assert str(config) in entry["args"]
    assert not (Path(env["HOME"]) / "project" / ".mcp.json").exists()
    assert "claude --dangerously-load-development-channels server:pocolobby" in joined.stdout


def test_enrolling_an_existing_agent_replaces_its_token_at_redemption(
    module_broker: Broker, tmp_path: Path
):
    configs = module_broker.provision("enrol-again", ["worker"], tmp_path)
    old = configs["worker"].path
    code = issued_code(module_broker.cli_ok("agent", "enroll", "enrol-again", "worker").stdout)
    # Until the code is redeemed, the old token works.
    assert module_broker.cli("msg", "inbox", "--config", str(old)).returncode == 0

    env = agent_machine(tmp_path, "worker")
    new = Path(env["HOME"]) / "worker.json"
    assert join(module_broker, env, code, "--host", "shell", "--config", str(new)).returncode == 0
    refused = module_broker.cli("msg", "inbox", "--config", str(old))
    assert refused.returncode == 2 and "token_revoked" in refused.stderr
    assert module_broker.cli("msg", "inbox", "--config", str(new)).returncode == 0

    audit = audit_actions(module_broker, "enrol-again")
    assert audit.count("enrollment_issued") == 1 and audit.count("enrollment_redeemed") == 1


def audit_actions(broker: Broker, lobby: str) -> list[str]:
    with sqlite3.connect(broker.data_dir / "pocolobby.sqlite3") as db:
        return [
            row[0]
            for row in db.execute(
                "SELECT action FROM lobbies_auditevent WHERE lobby_name = ?", (lobby,)
            )
        ]


def test_a_new_code_cancels_the_earlier_one_and_an_unknown_code_says_so(
    module_broker: Broker, tmp_path: Path
):
    module_broker.provision("enrol-twice", ["api"], tmp_path)
    first = issued_code(module_broker.cli_ok("agent", "enroll", "enrol-twice", "api").stdout)
    second = issued_code(module_broker.cli_ok("agent", "enroll", "enrol-twice", "api").stdout)
    env = agent_machine(tmp_path, "api")

    stale = join(module_broker, env, first, "--host", "shell")
    assert stale.returncode == 1 and "(404 unknown_code)" in stale.stderr
    # Case and separators do not matter; the code is redeemed once.
    secret, url = second.split("@")
    typed = secret.lower().replace("-", " ")
    assert join(module_broker, env, typed, "--url", url, "--host", "shell").returncode == 0


def test_an_expired_code_is_refused_and_writes_nothing(module_broker: Broker, tmp_path: Path):
    module_broker.provision("enrol-late", ["slow"], tmp_path)
    code = issued_code(
        module_broker.cli_ok("agent", "enroll", "enrol-late", "slow", "--expires", "1").stdout
    )
    with sqlite3.connect(module_broker.data_dir / "pocolobby.sqlite3") as db:
        db.execute("UPDATE lobbies_enrollment SET expires_at = '2020-01-01 00:00:00'")
    env = agent_machine(tmp_path, "slow")
    late = join(module_broker, env, code, "--host", "shell")
    assert late.returncode == 1 and "(410 code_expired)" in late.stderr
    assert "ask the operator for a new one" in late.stderr
    folder = Path(env["XDG_CONFIG_HOME"]) / "pocolobby"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_guessing_codes_is_refused_after_ten_from_one_network(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory(name="enrol-guess")  # its own, so no other test's refusals count
    env = agent_machine(tmp_path, "guesser")
    answers = [
        join(broker, env, f"AAAA-BBBB-CCCC-DDDD-{i:04d}@{broker.url}", "--host", "shell")
        for i in range(11)
    ]
    assert all("unknown_code" in a.stderr for a in answers[:10])
    assert "(429 rate_limited)" in answers[10].stderr


def test_join_refuses_a_broker_it_cannot_reach_or_may_not_trust(
    module_broker: Broker, tmp_path: Path
):
    env = agent_machine(tmp_path, "nowhere")
    port = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{port.getsockname()[1]}"
    port.close()
    down = join(module_broker, env, f"AAAA-BBBB-CCCC-DDDD-EEEE@{url}", "--host", "shell")
    assert down.returncode == 1
    assert f"the broker at {url} was not reached" in down.stderr
    assert "nothing was written" in down.stderr

    clear = join(module_broker, env, "AAAA@http://broker.example.com", "--host", "shell")
    assert clear.returncode == 1 and "refusing plain http" in clear.stderr
    bare = join(module_broker, env, "AAAA-BBBB", "--host", "shell")
    assert bare.returncode == 1 and "names no broker" in bare.stderr


# ------------------------------------------------------------------ the whole first day


def real_claude_code() -> str:
    """Claude Code from the npm registry; skipped where missing unless required (CI)."""
    claude = claude_executable()
    if claude is None:
        if os.environ.get("POCOLOBBY_REQUIRE_CLAUDE_CODE") == "1":
            raise RuntimeError("POCOLOBBY_REQUIRE_CLAUDE_CODE=1 but Claude Code is missing")
        pytest.skip("real Claude Code is not installed (POCOLOBBY_CLAUDE)")
    return claude


def as_claude_code_runs_it(command: str, event: dict, project: Path, env: dict[str, str]):
    """A status line or hook command as Claude Code runs it: through the shell, in the
    project, the event's JSON on stdin."""
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(event),
        cwd=project,
        env=clean_env({**env, "CLAUDE_PROJECT_DIR": str(project)}),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def signed_in_operator(broker: Broker) -> httpx.Client:
    """The operator's browser on the broker's machine, signed in by `pocolobby settings`."""
    link = broker.cli_ok("settings").stdout.strip().splitlines()[-1]
    client = httpx.Client(base_url=broker.url, headers={"Origin": broker.url})
    redeemed = client.post("/ticket", json={"ticket": link.split("#ticket=", 1)[1]})
    assert redeemed.status_code == 200, redeemed.text
    # A Secure cookie, which a browser sends to 127.0.0.1 and httpx only when told.
    client.headers["Cookie"] = redeemed.headers["set-cookie"].split(";", 1)[0]
    return client


def test_a_fresh_machine_joins_for_claude_code_and_its_reports_reach_the_dashboard(
    module_broker: Broker, tmp_path: Path
):
    """Issue 40's first day: `agent add --enroll` on the broker's side; on a machine of its
    own, `join --host claude`; real Claude Code lists the server connected with no approval
    asked; the status line and both hooks connect wrote, run as Claude Code runs them, put the
    plan usage, the turn and its tokens on the dashboard."""
    claude = real_claude_code()
    module_broker.cli_ok("lobby", "create", "first-day")
    code = issued_code(module_broker.cli_ok("agent", "add", "first-day", "lead", "--enroll").stdout)
    env = agent_machine(tmp_path, "first-day")
    project = Path(env["HOME"]) / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    joined = join(module_broker, env, code, "--host", "claude", "--dir", str(project))
    assert joined.returncode == 0, joined.stderr
    assert "claude --dangerously-load-development-channels server:pocolobby" in joined.stdout
    assert not (project / ".mcp.json").exists()  # no machine's paths in the shared file

    listed = subprocess.run(
        [claude, "mcp", "list"], cwd=project, env=clean_env(env), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    line = next(x for x in listed.stdout.splitlines() if x.startswith("pocolobby:"))
    assert "Connected" in line and "Pending approval" not in line, listed.stdout

    settings = json.loads((project / ".claude" / "settings.local.json").read_text())
    hooks = {
        event: settings["hooks"][event][0]["hooks"][0]["command"]
        for event in ("UserPromptSubmit", "Stop")
    }
    now = int(time.time())
    status = {
        "session_id": "first-session",
        "model": {"display_name": "Opus"},
        "workspace": {"current_dir": str(project)},
        "rate_limits": {
            "five_hour": {"used_percentage": 37.0, "resets_at": now + 3600},
            "seven_day": {"used_percentage": 21.0, "resets_at": now + 5 * 86400},
        },
    }
    shown = as_claude_code_runs_it(settings["statusLine"]["command"], status, project, env)
    assert shown.returncode == 0 and shown.stdout.startswith("lead · 5h 63% left"), shown

    transcript = project / "first-session.jsonl"
    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    usage = {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 0}  # fmt: skip
    transcript.write_text(json.dumps({
        "type": "assistant", "timestamp": stamp, "message": {"id": "msg_1", "usage": usage},
    }) + "\n")  # fmt: skip
    turn = {"session_id": "first-session", "transcript_path": str(transcript), "cwd": str(project)}
    started = as_claude_code_runs_it(
        hooks["UserPromptSubmit"], {**turn, "hook_event_name": "UserPromptSubmit", "prompt": "go"},
        project, env,
    )  # fmt: skip
    assert started.returncode == 0 and started.stdout == "", started
    operator = signed_in_operator(module_broker)
    with sqlite3.connect(module_broker.data_dir / "pocolobby.sqlite3") as db:
        open_turns = db.execute(
            "SELECT count(*) FROM board_workstretch s JOIN lobbies_agent a ON a.id = s.agent_id "
            "WHERE a.agent_id = 'lead' AND s.ended_at IS NULL"
        ).fetchone()
    assert open_turns == (1,)  # the turn the dashboard's chip and active time read
    stopped = as_claude_code_runs_it(hooks["Stop"], {**turn, "hook_event_name": "Stop"}, project,
                                     env)  # fmt: skip
    assert stopped.returncode == 0 and stopped.stdout == "", stopped

    board = operator.get("/first-day/")
    assert board.status_code == 200, board.text
    assert '<span class="num">63% left</span>' in board.text  # the five-hour window
    assert "79% left" in board.text  # the week
    tokens = operator.get("/first-day/tokens")
    assert tokens.status_code == 200
    assert re.search(r'<td data-total="1500">', tokens.text), tokens.text
