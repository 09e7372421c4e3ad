"""The bridge and the broker spell the stream alike: one `lobbies.wire`, copied nowhere.

`lobbies.wire` is the only module both sides import; the bridge imports nothing else of the
broker and no Django (`test_units.test_the_bridge_and_the_cli_import_no_django...`).
"""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lobbies import selectors
from lobbies.access import credentials
from lobbies.push import consumers, frames, presentation
from lobbies.wire import frames as wire_frames
from pocolobby.bridge import broker, link, notices, results, state
from tests.server import REPO_ROOT

SHARED = (
    "EVENT_VERSION",
    "EVENT_VERSION_HEADER",
    "RUNTIME_HEADER",
    "GENERATION_HEADER",
    "FRAME_WELCOME",
    "FRAME_NOTICE",
    "FRAME_ERROR",
    "FRAME_RECEIVED",
    "FRAME_HOST_WRITTEN",
    "FRAME_HEARTBEAT",
    "FRAME_CATALOG",
)


def test_both_sides_hold_the_wire_modules_own_objects():
    for module in (consumers, frames, selectors, state, link, results):
        assert module.EVENT_VERSION is wire_frames.EVENT_VERSION, module.__name__
    for module in (link, broker):
        assert module.RUNTIME_HEADER is wire_frames.RUNTIME_HEADER
        assert module.GENERATION_HEADER is wire_frames.GENERATION_HEADER
    assert link.EVENT_VERSION_HEADER is wire_frames.EVENT_VERSION_HEADER
    frame_names = (
        "FRAME_WELCOME",
        "FRAME_NOTICE",
        "FRAME_ERROR",
        "FRAME_HEARTBEAT",
        "FRAME_CATALOG",
    )
    for name in frame_names:
        assert getattr(link, name) is getattr(wire_frames, name)
    assert consumers.FRAME_CATALOG is wire_frames.FRAME_CATALOG
    assert notices.FRAME_RECEIVED is wire_frames.FRAME_RECEIVED
    assert notices.FRAME_HOST_WRITTEN is wire_frames.FRAME_HOST_WRITTEN


def _assigned_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_no_module_defines_its_own_copy_of_a_wire_name():
    """A second `EVENT_VERSION = 5` anywhere is how the two sides drifted apart before."""
    copies = []
    for folder in ("lobbies", "console", "board", "pocolobby", "tests", "benchmarks"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            if path == REPO_ROOT / "lobbies" / "wire" / "frames.py" or "migrations" in path.parts:
                continue
            copies += [
                f"{path.relative_to(REPO_ROOT)}: {n}" for n in _assigned_names(path) & set(SHARED)
            ]
    assert copies == []


def test_the_broker_reads_the_headers_the_wire_names():
    """The broker parses these headers by the wire's own names, not strings of its own."""
    assert credentials.RUNTIME_HEADER is wire_frames.RUNTIME_HEADER
    assert credentials.GENERATION_HEADER is wire_frames.GENERATION_HEADER
    assert consumers.EVENT_VERSION_HEADER is wire_frames.EVENT_VERSION_HEADER


def test_the_wire_module_imports_nothing_of_django_or_the_apps():
    code = (
        "import sys, lobbies.wire\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'channels', 'console', 'board', 'pocolobby') or "
        "(m.startswith('lobbies') and m not in ('lobbies', 'lobbies.wire'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == "[]", result.stdout


class _Told:
    """A stand-in for the bridge: what the link handed it, frame by frame."""

    def __init__(self) -> None:
        self.notices: list[wire_frames.NoticeFrame] = []
        self.welcomes: list[wire_frames.WelcomeFrame] = []

    async def on_notice(self, frame: wire_frames.NoticeFrame, send: object) -> None:
        self.notices.append(frame)

    def on_welcome(self, frame: wire_frames.WelcomeFrame) -> None:
        self.welcomes.append(frame)

    def report_delivery(self) -> None:
        pass


async def _unused_send(frame: wire_frames.BridgeFrame) -> None:
    raise AssertionError("nothing is sent back for these frames")


def _reader(told: _Told) -> link._Reader:
    return link._Reader(told, link._Socket(), _unused_send)  # type: ignore[arg-type]


def _pushed_notice() -> wire_frames.NoticeFrame:
    """A notice as lobbies.push.frames builds it and the bridge's socket sends it."""
    row = {
        "id": uuid.UUID("00000000-0000-4000-8000-000000000001"),
        "generation": 3,
        "kind": "messages",
        "message_ids": [7, 8],
        "created_at": datetime(2026, 12, 3, 12, 0, tzinfo=UTC),
    }
    shown = presentation.Presentation(
        "PocoLobby: 2 new messages.\n{}", {"priority": "info", "scope": "direct"}, truncated=True
    )
    return frames._notice_frame(row, shown)


@pytest.mark.asyncio
async def test_a_notice_built_by_push_parses_in_the_bridge_to_the_same_frame():
    built = _pushed_notice()
    told = _Told()
    await _reader(told).take(json.dumps(built, ensure_ascii=False))  # as consumers sends it
    assert told.notices == [built]
    assert wire_frames.parse_notice(json.loads(json.dumps(built))) == built


@pytest.mark.asyncio
async def test_a_malformed_frame_is_refused_with_a_log_line_never_a_traceback(caplog):
    told = _Told()
    reader = _reader(told)
    malformed = {**_pushed_notice(), "message_ids": [7, "8"]}
    welcome = {"type": "welcome", "event_version": wire_frames.EVENT_VERSION, "generation": "1"}
    with caplog.at_level(logging.WARNING, logger="pocolobby.bridge.link"):
        await reader.take(json.dumps(malformed))
        await reader.take(json.dumps(welcome))
        await reader.take("[1, 2]")
        await reader.take("{not json")
    assert told.notices == [] and told.welcomes == []
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == (
        "refused a notice frame from the broker: message_ids: a list of integers expected"
    )
    assert said[1].startswith("refused a welcome frame from the broker: ")
    assert said[2:] == [
        "ignored a frame that is not a JSON object",
        "ignored a frame that is not JSON or nests too deeply",
    ]
    with pytest.raises(wire_frames.FrameRefused, match="content: text expected"):
        wire_frames.parse_notice({**_pushed_notice(), "content": None})
