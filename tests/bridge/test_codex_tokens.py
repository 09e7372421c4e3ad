"""Codex CLI's token counts from its own session files (issue 42): a rollout in the format
real Codex 0.171.0 wrote (tests/bridge/codex/rollout-0.171.0.jsonl, recorded against the
loopback stand-in, its long session_meta cut to the fields read) becomes the per-day bodies
the Stop hook sends, and the broker takes them."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest

from pocolobby.bridge.codex_tokens import token_reports
from tests.bridge_client import api
from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
RECORDED = Path(__file__).with_name("codex") / "rollout-0.171.0.jsonl"
SESSION = "01a243da-f99a-72f2-b7a8-fbb8c6bf92e2"


def _token_count(stamp: str, last: dict[str, int], total: dict[str, int]) -> str:
    info = {"total_token_usage": total, "last_token_usage": last, "model_context_window": 1}
    payload = {"type": "token_count", "info": info, "rate_limits": None}
    return json.dumps({"timestamp": stamp, "type": "event_msg", "payload": payload})


def _usage(inputs: int, cached: int, output: int) -> dict[str, int]:
    return {"input_tokens": inputs, "cached_input_tokens": cached, "cache_write_input_tokens": 0,
            "output_tokens": output, "reasoning_output_tokens": 0,
            "total_tokens": inputs + output}  # fmt: skip


def _sessions(home: Path, project: Path) -> None:
    """The recorded session, run in `project`, going on past midnight; another folder's."""
    recorded = RECORDED.read_text().replace('"/work/project"', json.dumps(str(project)))
    second = _usage(400, 300, 20)
    total = _usage(410, 300, 25)
    later = [
        # A rate-limit update repeats the total: not a response, not counted again.
        _token_count("2026-12-05T01:39:15.000Z", _usage(10, 0, 5), _usage(10, 0, 5)),
        _token_count("2026-12-06T00:00:01.000Z", second, total),
    ]
    day = home / "sessions" / "2026" / "12" / "05"
    day.mkdir(parents=True)
    (day / f"rollout-2026-12-05T01-39-13-{SESSION}.jsonl").write_text(
        recorded + "\n".join(later) + "\n"
    )
    elsewhere = recorded.replace(str(project), "/somewhere/else").replace(SESSION, "other")
    (day / "rollout-2026-12-05T02-00-00-other.jsonl").write_text(elsewhere)


def test_a_codex_rollout_becomes_per_day_token_counts(tmp_path: Path):
    home, project = tmp_path / ".codex", tmp_path / "project"
    project.mkdir()
    _sessions(home, project)
    [body] = token_reports(home, str(project))
    assert body == {
        "days": [
            # The recorded response: 10 in, 5 out, nothing cached.
            {"day": "2026-12-05", "session_id": SESSION, "input_tokens": 10,
             "output_tokens": 5, "cache_read_tokens": 0, "cache_creation_tokens": 0},
            # 400 in of which 300 were cache reads: 100 sent uncached.
            {"day": "2026-12-06", "session_id": SESSION, "input_tokens": 100,
             "output_tokens": 20, "cache_read_tokens": 300, "cache_creation_tokens": 0},
        ]
    }  # fmt: skip
    assert token_reports(home, str(project), now=time.time() + 3 * 86400) == []  # not recent


@pytest.mark.server
def test_the_broker_takes_the_codex_counts(module_broker: Broker, tmp_path: Path):
    configs = module_broker.provision("codex-tokens", ["codex"], tmp_path / "agents")
    home, project = tmp_path / ".codex", tmp_path / "project"
    project.mkdir()
    _sessions(home, project)
    for _ in range(2):  # sent again after the next turn: replaced, never counted twice
        for body in token_reports(home, str(project)):
            asyncio.run(api(module_broker.url, configs["codex"].token, "PUT", "/v1/tokens", body))
    with sqlite3.connect(module_broker.data_dir / "pocolobby.sqlite3") as db:
        rows = db.execute(
            "SELECT day, input_tokens, output_tokens, cache_read_tokens FROM board_tokensession "
            "ORDER BY day"
        ).fetchall()
    assert rows == [("2026-12-05", 10, 5, 0), ("2026-12-06", 100, 20, 300)]
