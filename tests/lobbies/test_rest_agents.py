"""Resting: nothing is pushed to a resting agent; its messages still queue; resume wakes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
import time_machine
from channels.layers import get_channel_layer

from lobbies.actions.messages import send_message
from lobbies.api.schemas import SendMessage
from lobbies.models import Agent
from lobbies.push import timers
from tests.lobbies.stream import bootstrapped, frame, new_runtime, open_stream, sync


def test_rest_needs_manage_rooms_and_known_agents(lead, backend):
    status, body = backend.call("rest_agents", agent_ids=["lead"], rest=True)
    assert (status, body["error"]["code"]) == (403, "permission_required")
    status, body = lead.call("rest_agents", agent_ids=["ghost"], rest=True)
    assert (status, body["error"]["code"]) == (400, "unknown_agent")


def test_rest_and_resume_at_a_set_time(lead, backend):
    start = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        lead.ok("rest_agents", agent_ids=["backend"], rest=True)
        later = (start + timedelta(hours=1)).isoformat()
        lead.ok("rest_agents", agent_ids=["backend"], rest=False, at=later)
    assert Agent.objects.get(agent_id="backend").resting is True
    timers.tick(start + timedelta(minutes=30))
    assert Agent.objects.get(agent_id="backend").resting is True
    timers.tick(start + timedelta(hours=1, seconds=1))
    assert Agent.objects.get(agent_id="backend").resting is False


@pytest_asyncio.fixture
async def fresh_layer():
    yield
    await get_channel_layer().flush()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_nothing_is_pushed_while_resting_and_resume_pushes(fresh_layer, lead, backend):
    stream = await open_stream(backend.token, new_runtime())
    _, notice = await bootstrapped(stream)
    await sync(lead.ok)("rest_agents", agent_ids=["backend"], rest=True)
    args = SendMessage(to="backend", content="while resting", client_request_id="r1")
    sent = await sync(lambda: send_message(lead.agent, args).message.pk)()
    assert await stream.receive_nothing(timeout=0.4)
    assert [m["message_id"] for m in (await sync(backend.ok)("get_messages"))["messages"]] == [sent]
    await sync(lead.ok)("rest_agents", agent_ids=["backend"], rest=False)
    pushed = await frame(stream)
    assert pushed["message_ids"] == [sent]
    assert json.loads(notice["content"].split("\n", 1)[1])["nonce"]
    await stream.disconnect()
