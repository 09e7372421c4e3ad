"""The wire leaf: what the broker and the bridge must agree on, and that it stays a leaf."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest

from lobbies.wire import cursors, facts, frames, jsontext
from pocolobby.bridge import link


def test_the_wire_module_loads_without_django_or_any_other_project_module():
    probe = (
        "import sys, lobbies.wire; "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'lobbies', 'console', 'board', 'pocolobby')); print(loaded)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['lobbies', 'lobbies.wire']"


def test_the_bridge_states_the_event_version_the_broker_speaks():
    assert link.EVENT_VERSION == frames.EVENT_VERSION


def test_times_on_the_wire_are_utc_milliseconds_with_a_z():
    moment = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert facts.iso(moment) == "2026-03-01T10:00:00.123Z"
    assert facts.iso(None) is None


def test_a_cursor_reads_back_only_in_its_own_view():
    cursor = cursors.encode_cursor("inbox", 42)
    assert cursors.decode_cursor("inbox", cursor) == 42
    with pytest.raises(cursors.CursorError, match="another view"):
        cursors.decode_cursor("history", cursor)
    with pytest.raises(cursors.CursorError, match="not one this broker issued"):
        cursors.decode_cursor("inbox", "%%%")


def test_addressing_facts_name_only_what_applies():
    class Plain:
        room_name, addressed_to, supersedes = "", [], None
        deliver_at, late, schedule_id, slot = None, False, None, None

    class Scheduled(Plain):
        room_name, schedule_id = "ops", 7
        slot = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    assert facts.addressing_facts(Plain()) == {}
    assert facts.addressing_facts(Scheduled()) == {
        "room_id": "ops",
        "late": False,
        "schedule_id": 7,
        "slot": "2026-03-01T09:00:00.000Z",
    }


def test_nesting_is_counted_outside_strings_without_recursion():
    assert jsontext.json_nesting(b"1") == 0
    assert jsontext.json_nesting(b'{"a": [1, {"b": "[[[{{{\\"[["}]}') == 3
    assert jsontext.json_nesting(b"[" * 200_000 + b"]" * 200_000) == 200_000


def test_load_json_refuses_past_its_bound_and_reads_up_to_it():
    assert jsontext.load_json("[" * 64 + "]" * 64) is not None
    assert jsontext.load_json(b'{"a": "' + b"[" * 500 + b'"}') == {"a": "[" * 500}
    for depth in (65, 1024, 100_000):
        with pytest.raises(jsontext.JsonTooDeep, match="the form nests JSON deeper than 64 levels"):
            jsontext.load_json("[" * depth + "]" * depth, what="the form")


def test_the_top_level_of_text_too_deep_to_parse_is_read():
    deep = b"[" * 5000 + b"]" * 5000
    line = b'{"jsonrpc": "2.0", "params": {"id": 1, "x": ' + deep + b'}, "id": "q\\"1", "n": null}'
    assert jsontext.scalar_members(line) == {"jsonrpc": "2.0", "id": 'q"1', "n": None}
    assert jsontext.scalar_members(deep) == {}
