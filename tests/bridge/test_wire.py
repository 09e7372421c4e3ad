"""The bridge and the broker spell the stream alike: one `lobbies.wire`, copied nowhere.

`lobbies.wire` is the only module both sides import; the bridge imports nothing else of the
broker and no Django (`test_units.test_the_bridge_and_the_cli_import_no_django...`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from lobbies import consumers, presentation, wire
from pocolobby.bridge import broker, core, link, results
from tests.server import REPO_ROOT

SHARED = (
    "EVENT_VERSION",
    "EVENT_VERSION_HEADER",
    "RUNTIME_HEADER",
    "GENERATION_HEADER",
    "WELCOME_FRAME",
    "NOTICE_FRAME",
    "ERROR_FRAME",
    "RECEIVED_FRAME",
    "HOST_WRITTEN_FRAME",
    "HEARTBEAT_FRAME",
)


def test_both_sides_hold_the_wire_modules_own_objects():
    for module in (presentation, consumers, core, link, results):
        assert module.EVENT_VERSION is wire.EVENT_VERSION, module.__name__
    for module in (link, broker):
        assert module.RUNTIME_HEADER is wire.RUNTIME_HEADER
        assert module.GENERATION_HEADER is wire.GENERATION_HEADER
    assert link.EVENT_VERSION_HEADER is wire.EVENT_VERSION_HEADER
    for name in ("WELCOME_FRAME", "NOTICE_FRAME", "ERROR_FRAME", "HEARTBEAT_FRAME"):
        assert getattr(link, name) is getattr(wire, name)
    assert core.RECEIVED_FRAME is wire.RECEIVED_FRAME
    assert core.HOST_WRITTEN_FRAME is wire.HOST_WRITTEN_FRAME


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
            if path == REPO_ROOT / "lobbies" / "wire.py" or "migrations" in path.parts:
                continue
            copies += [
                f"{path.relative_to(REPO_ROOT)}: {n}" for n in _assigned_names(path) & set(SHARED)
            ]
    assert copies == []


def test_the_broker_reads_the_headers_the_wire_names():
    """The broker parses these headers in its own words; they must be the wire's words."""
    api = (REPO_ROOT / "lobbies" / "api.py").read_text(encoding="utf-8")
    stream = (REPO_ROOT / "lobbies" / "consumers.py").read_text(encoding="utf-8")
    for header in (wire.RUNTIME_HEADER, wire.GENERATION_HEADER):
        assert header in api or header in stream
    for header in (wire.EVENT_VERSION_HEADER, wire.RUNTIME_HEADER, wire.GENERATION_HEADER):
        assert f'"{header.lower()}"' in stream, header


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
