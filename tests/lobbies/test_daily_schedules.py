"""Daily schedules: real messages at local times, across DST, one late occurrence after outages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from lobbies.actions import operator
from lobbies.models import Message, Schedule, ScheduleOccurrence
from lobbies.push import timers


def _schedule(client, **options):
    args = {
        "client_request_id": "s1",
        "content": "morning check",
        "time_zone": "Europe/Berlin",
        "times": ["09:00"],
    } | options
    return client.ok("schedule_message", **args)


def _tick_at(moment: datetime) -> None:
    with time_machine.travel(moment, tick=False):
        timers.tick()


def test_each_occurrence_is_a_real_message_with_its_slot(lead, backend):
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        created = _schedule(lead, to="backend", times=["09:00", "10:00"])
    assert created["next_slot"] == "2026-12-01T08:00:00.000Z"  # 09:00 in Berlin (CET)
    _tick_at(datetime(2026, 12, 1, 8, 0, 1, tzinfo=UTC))
    _tick_at(datetime(2026, 12, 1, 8, 30, tzinfo=UTC))  # nothing due
    _tick_at(datetime(2026, 12, 1, 9, 0, 1, tzinfo=UTC))
    inbox = backend.ok("get_messages")["messages"]
    assert [m["content"] for m in inbox] == ["morning check", "morning check"]
    assert inbox[0]["message_id"] != inbox[1]["message_id"]
    assert inbox[0]["schedule_id"] == created["schedule_id"]
    assert [m["slot"] for m in inbox] == ["2026-12-01T08:00:00.000Z", "2026-12-01T09:00:00.000Z"]


def test_an_occurrence_carries_its_slot_as_deliver_at(lead, backend):
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        _schedule(lead, to="backend")
    _tick_at(datetime(2026, 12, 1, 8, 20, tzinfo=UTC))  # the 09:00 Berlin slot, 20 min late
    (received,) = backend.ok("get_messages")["messages"]
    assert received["deliver_at"] == received["slot"] == "2026-12-01T08:00:00.000Z"
    (sent,) = lead.ok("get_messages", view="history")["messages"]
    assert sent["deliver_at"] == "2026-12-01T08:00:00.000Z" and sent["late"] is True


def test_a_skipped_spring_time_runs_just_after_the_gap(lead, backend):
    with time_machine.travel(datetime(2026, 3, 28, 12, 0, tzinfo=UTC), tick=False):
        created = _schedule(lead, to="backend", times=["02:30"])
    assert created["next_slot"] == "2026-03-29T01:00:00.000Z"  # 03:00 CEST


def test_a_repeated_autumn_time_runs_once(lead, backend):
    with time_machine.travel(datetime(2026, 10, 24, 12, 0, tzinfo=UTC), tick=False):
        _schedule(lead, to="backend", times=["02:30"])
    for moment in (
        datetime(2026, 10, 25, 0, 30, 1, tzinfo=UTC),  # 02:30 CEST, the first
        datetime(2026, 10, 25, 1, 30, 1, tzinfo=UTC),  # 02:30 CET, the repeat
    ):
        _tick_at(moment)
    assert Message.objects.count() == 1


def test_new_york_across_its_spring_change(lead, backend):
    with time_machine.travel(datetime(2026, 3, 7, 12, 0, tzinfo=UTC), tick=False):
        created = _schedule(lead, to="backend", time_zone="America/New_York", times=["09:00"])
    assert created["next_slot"] == "2026-03-07T14:00:00.000Z"  # EST
    _tick_at(datetime(2026, 3, 7, 14, 0, 1, tzinfo=UTC))
    nxt = lead.ok("list_scheduled")["schedules"][0]["next_slot"]
    assert nxt == "2026-03-08T13:00:00.000Z"  # EDT


def test_after_an_outage_one_late_occurrence_for_the_latest_slot(lead, backend):
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        _schedule(lead, to="backend", times=["09:00", "13:00", "17:00"])
    _tick_at(datetime(2026, 12, 4, 10, 0, tzinfo=UTC))  # down for three days
    inbox = backend.ok("get_messages")["messages"]
    assert len(inbox) == 1
    assert inbox[0]["slot"] == "2026-12-04T08:00:00.000Z" and inbox[0]["late"] is True


def test_weekdays_only(lead, backend):
    # 2026-12-05 is a Saturday.
    with time_machine.travel(datetime(2026, 12, 4, 12, 0, tzinfo=UTC), tick=False):
        created = _schedule(lead, to="backend", weekdays=[1, 2, 3, 4, 5])
    assert created["next_slot"] == "2026-12-07T08:00:00.000Z"


def test_a_failed_occurrence_is_skipped_with_its_reason_and_the_schedule_goes_on(
    make_agent, lead, backend
):
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        _schedule(lead, to="backend")
    operator.disable_agent("my-team", "backend")
    _tick_at(datetime(2026, 12, 1, 8, 0, 1, tzinfo=UTC))
    occurrence = ScheduleOccurrence.objects.get()
    assert occurrence.outcome == "skipped" and "recipient_disabled" in occurrence.reason
    operator.enable_agent("my-team", "backend")
    _tick_at(datetime(2026, 12, 2, 8, 0, 1, tzinfo=UTC))
    assert ScheduleOccurrence.objects.filter(outcome="sent").count() == 1


def test_room_occurrences_resolve_members_when_they_fire(make_agent, lead, backend):
    ops = make_agent("ops")
    lead.ok("create_room", room_id="app", members=["lead", "backend"])
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        _schedule(lead, room_id="app")
    lead.ok("add_room_members", room_id="app", members=["ops"])
    _tick_at(datetime(2026, 12, 1, 8, 0, 1, tzinfo=UTC))
    assert [m["content"] for m in ops.ok("get_messages")["messages"]] == ["morning check"]


@pytest.mark.parametrize(
    ("options", "code", "fragment"),
    [
        ({"to": "backend", "time_zone": "Mars/Base"}, "invalid_schedule", "Mars/Base"),
        ({"to": "backend", "times": ["25:00"]}, "invalid_schedule", "25:00"),
        ({"to": "backend", "weekdays": [0]}, "invalid_schedule", "weekday"),
        ({"to": "backend", "room_id": "app"}, "invalid_arguments", "exactly one"),
        ({"broadcast": True}, "permission_required", "broadcast"),
    ],
)
def test_bad_schedules_are_refused(lead, backend, options, code, fragment):
    args = {
        "client_request_id": "s1",
        "content": "x",
        "time_zone": "Europe/Berlin",
        "times": ["09:00"],
    } | options
    status, body = lead.call("schedule_message", **args)
    assert body["error"]["code"] == code and fragment in body["error"]["message"], body
    assert 400 <= status < 500


def test_at_most_20_schedules_and_cancelling_one_frees_room(lead, backend):
    ids = [
        _schedule(lead, to="backend", client_request_id=f"s{n}")["schedule_id"] for n in range(20)
    ]
    status, body = lead.call(
        "schedule_message",
        client_request_id="s-x",
        to="backend",
        content="x",
        time_zone="UTC",
        times=["09:00"],
    )
    assert (status, body["error"]["code"]) == (409, "too_many_schedules")
    lead.ok("cancel_scheduled", schedule_id=ids[0])
    assert _schedule(lead, to="backend", client_request_id="s-y")["schedule_id"]


def test_an_identical_retry_returns_the_schedule(lead, backend):
    first = _schedule(lead, to="backend")
    again = _schedule(lead, to="backend")
    assert again["schedule_id"] == first["schedule_id"] and again["duplicate"] is True
    status, body = lead.call(
        "schedule_message",
        client_request_id="s1",
        to="backend",
        content="changed",
        time_zone="Europe/Berlin",
        times=["09:00"],
    )
    assert (status, body["error"]["code"]) == (409, "idempotency_conflict")


@pytest.mark.parametrize(
    ("target", "code"),
    [({"to": "ghost"}, "unknown_recipient"), ({"room_id": "nowhere"}, "unknown_room")],
)
def test_a_schedule_to_an_agent_or_room_that_does_not_exist_is_refused(lead, target, code):
    status, body = lead.call(
        "schedule_message",
        client_request_id="s-ghost",
        content="never",
        time_zone="UTC",
        times=["09:00"],
        **target,
    )
    assert (status, body["error"]["code"]) == (404, code)
    assert not Schedule.objects.exists()


def test_an_occurrence_to_a_disabled_agent_is_skipped_with_the_reason(lead, backend):
    with time_machine.travel(datetime(2026, 12, 1, 6, 0, tzinfo=UTC), tick=False):
        _schedule(lead, to="backend")
        operator.disable_agent("my-team", "backend")
    _tick_at(datetime(2026, 12, 1, 8, 0, 1, tzinfo=UTC))
    occurrence = ScheduleOccurrence.objects.get()
    assert occurrence.outcome == "skipped" and occurrence.message_id is None
    assert occurrence.reason.startswith("recipient_disabled")
    assert not Message.objects.exists()


def test_a_daily_schedule_to_the_owner_is_refused_and_nothing_is_stored(lead):
    status, body = lead.call(
        "schedule_message",
        client_request_id="s-owner",
        to="owner",
        content="daily status",
        time_zone="UTC",
        times=["09:00"],
    )
    assert status == 400 and body["error"]["code"] == "invalid_arguments"
    assert "set_owner_requests" in body["error"]["message"]
    assert not Schedule.objects.exists()
