"""The dispatcher's timers: retries with a budget, bootstrap retries, pushed read receipts."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import pytest_asyncio
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lobbies.actions.messages import send_message
from lobbies.actions.schedules import fire_schedule
from lobbies.agent_selectors import list_agents
from lobbies.api.schemas import SendMessage
from lobbies.models import Agent, Schedule, SeenReceipt
from lobbies.push import timers
from tests.lobbies.stream import bootstrapped, frame, new_runtime, open_stream, run_tick, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

SCHEDULE = (30, 60, 120, 300, 300)


@pytest_asyncio.fixture(autouse=True)
async def fresh_layer():
    yield
    await get_channel_layer().flush()


def _send(sender, to: str, key: str, **options) -> int:
    args = SendMessage(to=to, content=f"message {key}", client_request_id=key, **options)
    return send_message(sender.agent, args).message.pk


def _agent(name: str) -> Agent:
    return Agent.objects.get(agent_id=name)


async def _connected(client):
    stream = await open_stream(client.token, new_runtime())
    _, notice = await bootstrapped(stream)
    nonce = json.loads(notice["content"].split("\n", 1)[1])["nonce"]
    await sync(client.ok)("ready", nonce=nonce)
    return stream


async def test_an_unconfirmed_push_is_retried_as_a_hint_naming_its_messages(lead, backend):
    stream = await _connected(backend)
    first = await sync(_send)(lead, "backend", "r-1")
    await frame(stream)  # pushed, but the bridge never confirms a host write
    now = timezone.now()
    await run_tick(now + timedelta(seconds=5))
    assert await stream.receive_nothing(timeout=0.2)  # not due yet
    await run_tick(now + timedelta(seconds=31))
    hint = await frame(stream)
    assert hint["notice_kind"] == "hint" and hint["message_ids"] == [first]
    assert hint["content"].startswith("PocoLobby reminder: as of ")
    assert f"still unacknowledged: {first}." in hint["content"]
    agent = await sync(_agent)("backend")
    assert agent.notify_attempts == 1
    assert agent.notify_next_at > now + timedelta(seconds=31 + 59)
    await stream.disconnect()


async def test_a_retry_behind_a_confirmed_host_write_is_consumed_silently(lead, backend):
    stream = await _connected(backend)
    await sync(_send)(lead, "backend", "r-1")
    notice = await frame(stream)
    await stream.send_json_to({"type": "host_written", "notice_id": notice["notice_id"]})
    await stream.send_json_to({"type": "heartbeat"})
    await frame(stream)
    await run_tick(timezone.now() + timedelta(seconds=31))
    assert await stream.receive_nothing(timeout=0.3)
    assert (await sync(_agent)("backend")).notify_attempts == 1
    await stream.disconnect()


async def test_exhaustion_keeps_messages_pending_and_flags_attention(lead, backend):
    stream = await _connected(backend)
    sent = await sync(_send)(lead, "backend", "r-1")
    await frame(stream)
    moment = timezone.now()
    for _ in range(len(SCHEDULE) + 1):
        moment += timedelta(seconds=301)
        await run_tick(moment)
    agent = await sync(_agent)("backend")
    assert agent.notification_attention_required is True and agent.notify_next_at is None
    shown = await sync(lambda: list_agents(lead.agent)["agents"])()
    assert {a["agent_id"]: a["notification_attention_required"] for a in shown}["backend"]
    inbox = await sync(backend.ok)("get_messages")
    assert [m["message_id"] for m in inbox["messages"]] == [sent]
    # Progress (an acknowledgment) clears the flag.
    await sync(backend.ok)("acknowledge_messages", message_ids=[sent])
    assert (await sync(_agent)("backend")).notification_attention_required is False
    await stream.disconnect()


async def test_the_budget_survives_a_reconnect(lead, backend):
    runtime = new_runtime()
    stream = await open_stream(backend.token, runtime)
    welcome, _ = await bootstrapped(stream)
    await sync(_send)(lead, "backend", "r-1")
    await frame(stream)
    await run_tick(timezone.now() + timedelta(seconds=31))
    await frame(stream)  # the hint
    await stream.disconnect()
    again = await open_stream(backend.token, runtime, generation=welcome["generation"])
    await frame(again)  # welcome
    await frame(again)  # the unconfirmed message again
    assert (await sync(_agent)("backend")).notify_attempts == 1
    await again.disconnect()


async def test_a_bootstrap_is_retried_at_the_longest_delay_and_never_after_ready(backend):
    stream = await open_stream(backend.token, new_runtime())
    _, first = await bootstrapped(stream)
    start = timezone.now()
    await run_tick(start + timedelta(seconds=31))
    assert await stream.receive_nothing(timeout=0.3)  # not after 30 s
    await run_tick(start + timedelta(seconds=301))
    again = await frame(stream)
    assert again["notice_kind"] == "bootstrap" and again["notice_id"] != first["notice_id"]
    nonce = json.loads(again["content"].split("\n", 1)[1])["nonce"]
    await sync(backend.ok)("ready", nonce=nonce)
    await run_tick(start + timedelta(seconds=1000))
    assert await stream.receive_nothing(timeout=0.3)
    await stream.disconnect()


async def test_read_receipts_are_pushed_coalesced_to_the_sender(lead, backend, make_agent):
    ops = await sync(make_agent)("ops")
    lead_stream = await _connected(lead)
    first = await sync(_send)(lead, "backend", "r-1", notify_when_seen=True)
    second = await sync(_send)(lead, "ops", "r-2", notify_when_seen=True)
    quiet = await sync(_send)(lead, "backend", "r-3")
    await sync(backend.ok)("acknowledge_messages", message_ids=[first, quiet])
    await sync(ops.ok)("acknowledge_messages", message_ids=[second])
    now = timezone.now()
    await run_tick(now)  # each receipt waits two seconds first
    assert await lead_stream.receive_nothing(timeout=0.2)
    await run_tick(now + timedelta(seconds=3))
    receipts = await frame(lead_stream)
    assert receipts["notice_kind"] == "receipts" and sorted(receipts["message_ids"]) == sorted(
        [first, second]
    )
    assert "backend saw message" in receipts["content"] and "ops saw message" in receipts["content"]
    # No inbox row: the receipt is not a message and needs no acknowledgment.
    assert (await sync(lead.ok)("get_messages"))["messages"] == []
    # A later receipt waits until 30 s after the last event.
    fourth = await sync(_send)(lead, "backend", "r-4", notify_when_seen=True)
    await sync(backend.ok)("acknowledge_messages", message_ids=[fourth])
    await run_tick(now + timedelta(seconds=10))
    assert await lead_stream.receive_nothing(timeout=0.2)
    await run_tick(now + timedelta(seconds=40))
    assert (await frame(lead_stream))["message_ids"] == [fourth]
    await lead_stream.disconnect()


async def test_notes_to_self_produce_no_receipt_and_no_push(lead):
    stream = await _connected(lead)
    note = await sync(_send)(lead, "lead", "self-1", notify_when_seen=True)
    assert await stream.receive_nothing(timeout=0.3)
    await sync(lead.ok)("acknowledge_messages", message_ids=[note])
    assert await sync(SeenReceipt.objects.count)() == 0
    await stream.disconnect()


async def test_a_daily_reminder_to_yourself_wakes_you_when_it_fires(lead):
    """A note to yourself wakes nobody; a schedule's occurrence to yourself does."""
    stream = await _connected(lead)
    await sync(lead.ok)(
        "schedule_message",
        to="lead",
        content="stand up",
        client_request_id="s-1",
        time_zone="UTC",
        times=["09:00"],
    )
    schedule = await sync(Schedule.objects.get)()
    assert schedule.next_slot is not None
    await sync(fire_schedule)(schedule.pk, schedule.next_slot + timedelta(seconds=1))
    pushed = await frame(stream)
    assert pushed["notice_kind"] == "messages" and "stand up" in pushed["content"]
    await stream.disconnect()


async def test_an_idle_broker_tick_writes_nothing(lead, backend):
    stream = await _connected(backend)

    def idle_tick() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            timers.tick(timezone.now())
        return [q["sql"] for q in queries.captured_queries]

    statements = await sync(idle_tick)()
    assert statements and all(s.lstrip().upper().startswith("SELECT") for s in statements)
    await stream.disconnect()


async def test_a_resting_agents_due_retry_waits_without_writing(lead, backend):
    now = timezone.now()

    def two_ticks() -> list[str]:
        Agent.objects.filter(pk=backend.agent.pk).update(
            resting=True, notify_next_at=now - timedelta(seconds=5), notify_attempts=1
        )
        with CaptureQueriesContext(connection) as queries:
            timers.tick(now)
            timers.tick(now + timedelta(seconds=1))
        return [q["sql"] for q in queries.captured_queries]

    statements = await sync(two_ticks)()
    assert statements and all(s.lstrip().upper().startswith("SELECT") for s in statements)
    waiting = await sync(Agent.objects.get)(pk=backend.agent.pk)
    assert (waiting.notify_attempts, waiting.notify_next_at) == (1, now - timedelta(seconds=5))
