"""The session's last turn as Claude Code's hooks saw it, kept in a file beside the agent's
configuration: `pocolobby hook` writes it, the bridge of the same session reads it.

A turn that started and has not ended means the session is working: Claude holds channel
events while a tool runs and shows every held copy afterwards, each costing a turn, so the
bridge offers no quick bootstrap repeat to a working session (pocolobby/bridge/notices.py).
The file is local and best effort: a write that fails costs only quick repeats.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Literal

from pocolobby.bridge.config import AgentConfig, Runtime, derive_runtime_id


def turn_path(config: AgentConfig) -> Path:
    return config.path.parent / f".{config.path.name}.turn.json"


def record_turn(
    config: AgentConfig, event: Literal["start", "end"], session_id: str, at: float
) -> None:
    """The hook's turn event; the session named by its runtime id, never its session id."""
    runtime = derive_runtime_id(config.token, session_id) if session_id else ""
    path = turn_path(config)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"event": event, "runtime_id": runtime, "at": at}, handle)
        os.replace(temp, path)
    with contextlib.suppress(OSError):
        temp.unlink(missing_ok=True)


def turn_open(config: AgentConfig, runtime: Runtime, since: float) -> bool:
    """Whether this session's last turn started (not before `since`) and has not ended.

    `since` leaves out a turn an earlier process of the conversation left open: Claude Code
    runs no Stop hook after the person interrupts a turn, and a resumed conversation presents
    the same runtime id."""
    try:
        data = json.loads(turn_path(config).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or data.get("event") != "start":
        return False
    at = data.get("at")
    if not isinstance(at, int | float) or at < since:
        return False
    # A process-scoped runtime has no session id to match; the hook's session is its own.
    return runtime.scope != "conversation" or data.get("runtime_id") == runtime.runtime_id
