"""Codex CLI's token counts, read from its own session files by the bridge it started.

Codex writes each session to `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`: a
`session_meta` line (its `id` and `cwd`), then events; after each model response an
`event_msg` of type `token_count` whose `info.last_token_usage` is that response's usage and
`info.total_token_usage` the session's running total (recorded from Codex 0.171.0 in
tests/bridge/test_codex_tokens.py). A `token_count` whose total did not move (a rate-limit
update) is not counted again. As OpenAI counts them, `cached_input_tokens` are part of
`input_tokens`: input is sent uncached, cache reads apart, as Claude Code's are.

Only sessions run in the bridge's own folder (the session's `cwd`) and written in the last two
days are read, so two Codex agents of one machine never count each other's. The bodies are
what `pocolobby hook` sends (PUT /v1/tokens: per session, per UTC day, replacing).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from lobbies.wire.jsontext import JSONObject

RECENT_SECONDS = 2 * 86400
FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


def codex_home(environ: Mapping[str, str]) -> Path:
    configured = environ.get("CODEX_HOME")
    return Path(configured) if configured else Path.home() / ".codex"


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _day(stamp: object) -> str | None:
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(UTC).date().isoformat()


def rollout_days(path: Path) -> tuple[str, str, dict[str, dict[str, int]]]:
    """(session id, its folder, token counts per UTC day) of one rollout file."""
    session, cwd = path.stem[-36:], ""
    days: dict[str, dict[str, int]] = {}
    last_total: object = None
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return session, cwd, days
    for raw in lines:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        payload = entry.get("payload") if isinstance(entry, dict) else None
        if not isinstance(payload, dict):
            continue
        if entry.get("type") == "session_meta":
            session = str(payload.get("id") or session)
            cwd = str(payload.get("cwd") or "")
            continue
        info = payload.get("info")
        if payload.get("type") != "token_count" or not isinstance(info, dict):
            continue
        total, usage, day = info.get("total_token_usage"), info.get("last_token_usage"), None
        if total == last_total or not isinstance(usage, dict):
            continue
        last_total, day = total, _day(entry.get("timestamp"))
        if day is None:
            continue
        cached = _count(usage.get("cached_input_tokens"))
        counts = days.setdefault(day, dict.fromkeys(FIELDS, 0))
        counts["input_tokens"] += max(0, _count(usage.get("input_tokens")) - cached)
        counts["output_tokens"] += _count(usage.get("output_tokens"))
        counts["cache_read_tokens"] += cached
        counts["cache_creation_tokens"] += _count(usage.get("cache_write_input_tokens"))
    return session, cwd, days


def token_reports(home: Path, cwd: str, now: float | None = None) -> list[JSONObject]:
    """The PUT /v1/tokens bodies for this folder's recent Codex sessions."""
    since = (time.time() if now is None else now) - RECENT_SECONDS
    bodies: list[JSONObject] = []
    for path in sorted((home / "sessions").glob("**/rollout-*.jsonl")):
        try:
            if path.stat().st_mtime < since:
                continue
        except OSError:
            continue
        session, folder, days = rollout_days(path)
        if not days or os.path.realpath(folder) != os.path.realpath(cwd):
            continue
        session = "".join(c for c in session if c.isalnum() or c in "._:-")[:100]
        bodies.append(
            {
                "days": [
                    {"day": day, "session_id": session, **counts}
                    for day, counts in sorted(days.items())[-400:]
                ]
            }
        )
    return bodies
