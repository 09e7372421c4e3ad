"""`pocolobby statusline` and `pocolobby hook` as Claude Code runs them: subprocesses with
JSON on stdin, against a real broker, with a fake `claude` on PATH."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow

EMAIL = "max-plan@example.com"


def _fake_claude(bin_dir: Path, calls: Path) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "claude"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{calls}"\n'
        f'echo \'{{"loggedIn": true, "authMethod": "claude.ai", "email": "{EMAIL}"}}\'\n'
    )
    script.chmod(0o755)


def _run(command: str, config: Path, stdin: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", command, "--config", str(config)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=clean_env({"PATH": path}),
        timeout=30,
        check=False,
    )


def _status_json(week_used: float = 55.0) -> str:
    now = int(time.time())
    return json.dumps(
        {
            "model": {"display_name": "Opus"},
            "workspace": {"current_dir": "/tmp"},
            "rate_limits": {
                "five_hour": {"used_percentage": 58.0, "resets_at": now + 3600},
                "seven_day": {"used_percentage": week_used, "resets_at": now + 3 * 86400},
            },
        }
    )


def _usage(broker: Broker, token: str) -> dict | None:
    listing = httpx.get(f"{broker.url}/v1/agents", headers={"Authorization": f"Bearer {token}"})
    return listing.json()["agents"][0]["usage"]


def test_statusline_prints_the_line_and_reports_the_reading_with_the_account(
    broker: Broker, tmp_path: Path
) -> None:
    config = broker.provision("cli-team", ["backend"], tmp_path)["backend"]
    calls = tmp_path / "claude-calls"
    _fake_claude(tmp_path / "bin", calls)
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"

    done = _run("statusline", config.path, _status_json(), path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "backend · 5h 42% left · week 45% left (on pace)"
    usage = _usage(broker, config.token)
    assert usage["seven_day"]["used_percentage"] == 55.0 and usage["off_pace"] is False
    state = tmp_path / f".{config.path.name}.reports.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert json.loads(state.read_text())["email"] == EMAIL

    # Within five minutes: no second `claude auth status`, and a changed reading is sent.
    done = _run("statusline", config.path, _status_json(week_used=75.0), path)
    assert done.returncode == 0
    assert calls.read_text().count("auth status --json") == 1
    assert _usage(broker, config.token)["seven_day"]["used_percentage"] == 75.0


def test_statusline_still_prints_when_the_broker_is_down_and_claude_is_missing(
    broker: Broker, tmp_path: Path
) -> None:
    config = broker.provision("down-team", ["backend"], tmp_path)["backend"]
    broker.stop()
    started = time.monotonic()
    done = _run("statusline", config.path, _status_json(), "/nonexistent")
    assert done.returncode == 0
    assert done.stdout.startswith("backend · 5h 42% left")
    assert time.monotonic() - started < 10
    junk = _run("statusline", config.path, "not json", "/nonexistent")
    assert junk.returncode == 0 and junk.stdout.strip() == "backend"


def _transcript(directory: Path, session: str) -> Path:
    """A main transcript whose one response spans two lines, and one subagent transcript."""
    line = {
        "type": "assistant",
        "timestamp": "2026-03-01T23:59:00.000Z",
        "message": {
            "id": "msg_1",
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
            },
        },
    }
    later = {**line, "timestamp": "2026-03-02T00:01:00.000Z"}
    later["message"] = {**line["message"], "id": "msg_2"}
    user = {"type": "user", "timestamp": "2026-03-02T00:00:30Z", "message": {"content": "hi"}}
    main = directory / f"{session}.jsonl"
    main.write_text("\n".join(json.dumps(x) for x in (user, line, line, later)) + "\n{broken\n")
    sub = directory / session / "subagents"
    sub.mkdir(parents=True)
    sub_line = {**later}
    sub_line["message"] = {**later["message"], "id": "msg_sub"}
    (sub / "agent-1.jsonl").write_text(json.dumps(sub_line) + "\n")
    return main


def _rows(broker: Broker, sql: str) -> list[tuple]:
    with sqlite3.connect(broker.data_dir / "pocolobby.sqlite3") as db:
        return db.execute(sql).fetchall()


def test_hook_reports_turns_and_token_days_silently(broker: Broker, tmp_path: Path) -> None:
    config = broker.provision("hook-team", ["backend"], tmp_path)["backend"]
    transcript = _transcript(tmp_path, "sess-1")
    path = os.environ["PATH"]
    prompt = {
        "hook_event_name": "UserPromptSubmit",
        "session_id": "sess-1",
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "prompt": "go",
    }
    done = _run("hook", config.path, json.dumps(prompt), path)
    assert done.returncode == 0 and done.stdout == ""
    assert _rows(broker, "SELECT ended_at FROM board_workstretch") == [(None,)]

    stop = {**prompt, "hook_event_name": "Stop"}
    stop.pop("prompt")
    for _ in range(2):  # a second Stop re-reads the same transcript: nothing counts twice
        done = _run("hook", config.path, json.dumps(stop), path)
        assert done.returncode == 0 and done.stdout == ""
    stretches = _rows(broker, "SELECT ended_at FROM board_workstretch")
    assert len(stretches) == 1 and stretches[0][0] is not None
    days = _rows(
        broker,
        "SELECT day, session_id, input_tokens, output_tokens, cache_read_tokens, "
        "cache_creation_tokens FROM board_tokensession ORDER BY day",
    )
    assert days == [
        ("2026-03-01", "sess-1", 10, 5, 100, 20),
        ("2026-03-02", "sess-1", 20, 10, 200, 40),  # msg_2 and the subagent's msg_sub
    ]


def test_hook_exits_0_on_junk_and_with_the_broker_down(broker: Broker, tmp_path: Path) -> None:
    config = broker.provision("junk-team", ["backend"], tmp_path)["backend"]
    for stdin in ("", "[]", "{not json", json.dumps({"hook_event_name": "Stop"})):
        done = _run("hook", config.path, stdin, os.environ["PATH"])
        assert done.returncode == 0 and done.stdout == ""
    broker.stop()
    done = _run("hook", config.path, json.dumps({"hook_event_name": "UserPromptSubmit"}), "")
    assert done.returncode == 0 and done.stdout == ""
    missing = _run("hook", tmp_path / "nope.json", "{}", "")
    assert missing.returncode == 0 and missing.stdout == ""


def test_tokens_backfills_a_transcript_by_hand_and_names_a_missing_one(
    broker: Broker, tmp_path: Path
) -> None:
    config = broker.provision("tokens-team", ["backend"], tmp_path)["backend"]
    transcript = _transcript(tmp_path, "sess-9")
    command = [sys.executable, "-m", "pocolobby", "tokens", "--config", str(config.path)]
    done = subprocess.run(
        [*command, str(transcript), str(tmp_path / "missing.jsonl")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=clean_env(),
        timeout=30,
        check=False,
    )
    assert done.returncode == 1  # one transcript was not there
    assert "no transcript at" in done.stderr and "missing.jsonl" in done.stderr
    assert "sess-9 2026-03-01: input 10, output 5" in done.stdout
    rows = _rows(broker, "SELECT day, input_tokens FROM board_tokensession ORDER BY day")
    assert rows == [("2026-03-01", 10), ("2026-03-02", 20)]
