from __future__ import annotations

from datetime import UTC, datetime

import time_machine

from lobbies.actions import operator
from lobbies.push import timers


def _by_name(body: dict) -> dict[str, dict]:
    return {a["agent_id"]: a for a in body["agents"]}


def test_discovery_lists_enabled_agents_of_the_lobby_only(make_agent, lead, backend):
    make_agent("ops")
    operator.disable_agent("my-team", "ops")
    operator.create_lobby("other-team")
    make_agent("stranger", lobby_name="other-team")
    body = lead.ok("list_agents")
    assert body["lobby"] == "my-team"
    assert list(_by_name(body)) == ["backend", "lead"]
    assert _by_name(body)["lead"]["permissions"] == {"manage_rooms": True, "broadcast": False}


def test_last_message_at_counts_sends_and_direct_receipts(make_agent, lead, backend):
    idle = make_agent("idle")
    sent = lead.send("backend", "hello", "r-1")
    agents = _by_name(idle.ok("list_agents"))
    assert agents["lead"]["last_message_at"] == sent["created_at"]
    assert agents["backend"]["last_message_at"] == sent["created_at"]
    assert agents["idle"]["last_message_at"] is None


def test_last_message_at_leaves_out_the_agents_own_schedule_occurrences(lead, backend):
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        lead.ok(
            "schedule_message",
            client_request_id="s1",
            to="backend",
            content="daily check",
            time_zone="UTC",
            times=["08:00"],
        )
    with time_machine.travel(datetime(2026, 12, 1, 8, 0, 1, tzinfo=UTC), tick=False):
        timers.tick()
        agents = _by_name(backend.ok("list_agents"))
    assert agents["lead"]["last_message_at"] is None  # a reminder is not the sender speaking
    assert agents["backend"]["last_message_at"] == "2026-12-01T08:00:01.000Z"  # delivered then


def test_an_agent_without_a_bridge_reads_disconnected_and_quiet(lead):
    entry = _by_name(lead.ok("list_agents"))["lead"]
    assert entry["connected"] is False and entry["last_heartbeat_at"] is None
    assert entry["unseen_notified_count"] == 0 and entry["oldest_unseen_notified_at"] is None
    assert entry["notification_attention_required"] is False


def test_status_line_is_set_shown_and_cleared(lead, backend):
    set_result = backend.ok("set_status", status="reviewing PR 42, then the migration")
    assert set_result["status"] == "reviewing PR 42, then the migration"
    shown = _by_name(lead.ok("list_agents"))["backend"]["status"]
    assert shown["line"] == "reviewing PR 42, then the migration" and shown["updated_at"]
    backend.ok("set_status", status="")
    assert _by_name(lead.ok("list_agents"))["backend"]["status"] is None


def test_status_line_must_be_one_bounded_line(backend):
    status, body = backend.call("set_status", status="two\nlines")
    assert status == 400 and "one line" in body["error"]["message"]
    status, body = backend.call("set_status", status="x" * 201)
    assert status == 400 and "status" in body["error"]["message"]


def test_owner_requests_replace_and_clear(lead, backend):
    backend.ok("set_owner_requests", count=2, line="approve the deploy; look at the dashboard")
    shown = _by_name(lead.ok("list_agents"))["backend"]["owner_requests"]
    assert shown["count"] == 2 and shown["line"].startswith("approve")
    backend.ok("set_owner_requests", count=1, line="approve the deploy")
    assert _by_name(lead.ok("list_agents"))["backend"]["owner_requests"]["count"] == 1
    backend.ok("set_owner_requests", count=0)
    assert _by_name(lead.ok("list_agents"))["backend"]["owner_requests"] is None


def test_owner_requests_need_a_line_and_a_sane_count(backend):
    status, body = backend.call("set_owner_requests", count=2)
    assert status == 400 and "line" in body["error"]["message"]
    status, _ = backend.call("set_owner_requests", count=100, line="x")
    assert status == 400
    status, _ = backend.call("set_owner_requests", count=0, line="leftover")
    assert status == 400


def test_owner_requests_are_cleared_when_the_owner_resets_the_runtime(lead, backend):
    backend.ok("set_owner_requests", count=1, line="approve")
    operator.reset_runtime("my-team", "backend")
    assert _by_name(lead.ok("list_agents"))["backend"]["owner_requests"] is None


def test_activity_is_the_latest_of_sent_received_and_acknowledged_with_idle_seconds(
    make_agent, lead, backend
):
    quiet = make_agent("quiet")
    with time_machine.travel(datetime(2026, 12, 1, 8, 0, tzinfo=UTC), tick=False):
        message_id = lead.send("backend", "hello", "r-1")["message_id"]
    with time_machine.travel(datetime(2026, 12, 1, 8, 5, tzinfo=UTC), tick=False):
        backend.ok("acknowledge_messages", message_ids=[message_id])
    with time_machine.travel(datetime(2026, 12, 1, 8, 10, tzinfo=UTC), tick=False):
        agents = _by_name(quiet.ok("list_agents"))
        (status,) = operator_status()
    assert agents["lead"]["last_activity_at"] == "2026-12-01T08:00:00.000Z"
    assert agents["lead"]["idle_seconds"] == 600
    assert agents["backend"]["last_message_at"] == "2026-12-01T08:00:00.000Z"
    assert agents["backend"]["last_activity_at"] == "2026-12-01T08:05:00.000Z"  # its receipt
    assert agents["backend"]["idle_seconds"] == 300
    assert agents["quiet"]["last_activity_at"] is None and agents["quiet"]["idle_seconds"] is None
    by_name = {a["agent_id"]: a for a in status["agents"]}
    assert by_name["backend"]["idle_seconds"] == 300


def operator_status() -> list[dict]:
    from lobbies import agent_selectors

    return agent_selectors.status("my-team")["lobbies"]
