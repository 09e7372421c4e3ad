"""A new conversation for an agent: admitted when the holder's conversation ended cleanly
(its bridge sent `release`), refused but recorded as waiting while the holder may still be
working (live, or gone without ending), and admitted by the owner's hand over, which fences
the holder exactly as a reset does."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from channels.layers import get_channel_layer
from django.test import Client
from django.utils import timezone

from lobbies import agent_selectors
from lobbies.actions import operator
from lobbies.actions.receipts import acknowledge_messages
from lobbies.actions.runtime import RuntimeCaller, release_runtime
from lobbies.errors import BrokerError
from lobbies.models import Agent, AuditEvent
from lobbies.push.presence import WAITING_CONFIRMED, WAITING_FRESH
from tests.conftest import AgentClient
from tests.lobbies.stream import bootstrapped, closed_with, frame, new_runtime, open_stream, sync

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest_asyncio.fixture(autouse=True)
async def fresh_layer():
    yield
    await get_channel_layer().flush()


def _payload(notice: dict[str, Any]) -> dict[str, Any]:
    return json.loads(notice["content"].split("\n", 1)[1])


def _as_runtime(agent: AgentClient, runtime: str, generation: int):
    """A tool call as that bridge process makes it: token plus runtime headers."""

    def call(tool: str, **arguments: Any) -> tuple[int, dict[str, Any]]:
        response = Client().post(
            f"/v1/tools/{tool}",
            data=json.dumps(arguments),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {agent.token}",
            HTTP_X_POCOLOBBY_RUNTIME=runtime,
            HTTP_X_POCOLOBBY_GENERATION=str(generation),
        )
        return response.status_code, response.json()

    return sync(call)


async def _holding(agent: AgentClient) -> tuple[Any, str, int]:
    """A conversation that bootstrapped and confirmed ready: it holds the agent for good."""
    runtime = new_runtime()
    stream = await open_stream(agent.token, runtime)
    welcome, notice = await bootstrapped(stream)
    status, _ = await _as_runtime(agent, runtime, welcome["generation"])(
        "ready", nonce=_payload(notice)["nonce"]
    )
    assert status == 200
    return stream, runtime, welcome["generation"]


async def _stale_write(call: Any) -> dict[str, Any]:
    status, answer = await call(
        "save_checkpoint", expected_revision=1, checkpoint={"x": 1}, covers_receipts_through=0
    )
    assert status == 409, answer
    return dict(answer)


async def _release(stream: Any) -> None:
    """What a bridge does when its host ends it: `release`, then the close."""
    await stream.send_json_to({"type": "release"})
    await stream.disconnect()


async def _refused(agent: AgentClient, runtime: str) -> str:
    stream = await open_stream(agent.token, runtime)
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("runtime_conflict", 4409), error
    return str(error["message"])


def _first_ask_earlier(agent: AgentClient, seconds: float) -> None:
    """The waiting conversation's first ask was `seconds` ago (its bridge asks every few)."""
    Agent.objects.filter(pk=agent.agent.pk).update(
        waiting_since=timezone.now() - timedelta(seconds=seconds)
    )


def _status_entry(agent_id: str) -> dict[str, Any]:
    (lobby,) = agent_selectors.status("my-team")["lobbies"]
    return next(a for a in lobby["agents"] if a["agent_id"] == agent_id)


def _actions() -> list[str]:
    return list(AuditEvent.objects.order_by("pk").values_list("action", flat=True))


async def test_after_a_clean_end_a_new_conversation_is_admitted_with_checkpoint_and_backlog(
    lead, backend
):
    stream, runtime, generation = await _holding(backend)
    holder = _as_runtime(backend, runtime, generation)
    status, _ = await holder(
        "save_checkpoint",
        expected_revision=0,
        checkpoint={"objective": "ship auth", "next": ["review PR 42"]},
        covers_receipts_through=0,
    )
    assert status == 200
    await _release(stream)
    assert (await sync(_status_entry)("backend"))["runtime_released_at"] is not None
    sent = [(await sync(lead.send)("backend", f"m{n}", f"r-{n}"))["message_id"] for n in (1, 2)]

    newcomer = new_runtime()
    fresh = await open_stream(backend.token, newcomer)
    welcome, notice = await bootstrapped(fresh)
    assert welcome["runtime_id"] == newcomer and welcome["generation"] == generation + 1
    payload = _payload(notice)
    assert payload["backlog"] == {"count": 2, "message_ids": sent}
    status, context = await _as_runtime(backend, newcomer, welcome["generation"])("get_context")
    assert status == 200
    assert context["checkpoint"]["checkpoint"]["objective"] == "ship auth"
    assert context["inbox"]["pending"] == 2
    audit = await sync(
        lambda: list(AuditEvent.objects.order_by("pk").values("action", "detail"))[-2:]
    )()
    assert audit[0] == {
        "action": "runtime_released",
        "detail": {"runtime_id": runtime, "generation": generation},
    }
    assert audit[1]["action"] == "runtime_taken_over"
    assert audit[1]["detail"]["taken_from"] == runtime
    assert audit[1]["detail"]["ended"] == "released"
    # The old conversation is fenced: its writes and its reconnects are refused.
    assert (await _stale_write(holder))["error"]["code"] == "generation_superseded"
    rejoin = await open_stream(backend.token, runtime, generation=generation)
    assert (await closed_with(rejoin))[0]["code"] == "runtime_conflict"
    # The newcomer holds the agent now: the next new conversation is refused again.
    await _as_runtime(backend, newcomer, welcome["generation"])("ready", nonce=payload["nonce"])
    await fresh.disconnect()
    await _refused(backend, new_runtime())


async def test_a_holder_that_vanished_without_ending_keeps_the_agent(backend):
    """A crash or a lost network sends no release: the session may still be working."""
    stream, _, _ = await _holding(backend)
    await stream.disconnect()
    said = await _refused(backend, new_runtime())
    assert "not connected but never ended cleanly" in said
    assert (await sync(_status_entry)("backend"))["runtime_released_at"] is None


async def test_only_the_current_process_releases_the_conversation(backend):
    """A second process of the same conversation (resumed elsewhere) took over: a release
    from the first one, racing its close, says nothing about the conversation."""
    stream, runtime, generation = await _holding(backend)
    restarted = await open_stream(backend.token, runtime)
    await bootstrapped(restarted)
    assert (await closed_with(stream))[0]["code"] == "generation_superseded"
    assert await sync(release_runtime)(backend.agent.pk, generation) is False
    await restarted.disconnect()
    await _refused(backend, new_runtime())
    assert "runtime_released" not in await sync(_actions)()


async def test_a_live_holder_refuses_with_who_since_and_how_and_the_wait_is_shown(backend):
    stream, runtime, _ = await _holding(backend)
    waiting = new_runtime()
    said = await _refused(backend, waiting)
    assert f"another conversation (runtime {runtime[:8]}) holds backend since" in said
    assert "and it is connected now" in said
    assert "`pocolobby agent hand-over my-team backend`" in said
    assert "Hand over on the lobby's dashboard" in said
    assert "reset-runtime my-team backend" in said
    # One ask is not a wait yet: a health check (`claude mcp list`) asks once and exits.
    assert (await sync(_status_entry)("backend"))["waiting"] is None
    await sync(_first_ask_earlier)(backend, WAITING_CONFIRMED.total_seconds() + 1)
    await _refused(backend, waiting)  # its bridge asks again
    entry = await sync(_status_entry)("backend")
    assert entry["waiting"]["runtime_id"] == waiting
    assert entry["waiting"]["since"] < entry["waiting"]["last_asked_at"]
    assert entry["runtime_id"] == runtime
    await stream.disconnect()


async def test_a_wait_nobody_asks_for_any_more_is_not_shown_and_cannot_be_handed_over(backend):
    stream, _, _ = await _holding(backend)
    waiting = new_runtime()
    await _refused(backend, waiting)
    await sync(
        lambda: Agent.objects.filter(pk=backend.agent.pk).update(
            waiting_since=timezone.now() - WAITING_FRESH * 3,
            waiting_seen_at=timezone.now() - WAITING_FRESH * 2,
        )
    )()
    assert (await sync(_status_entry)("backend"))["waiting"] is None
    with pytest.raises(BrokerError) as refused:
        await sync(operator.hand_over)("my-team", "backend")
    assert refused.value.code == "nothing_waiting"
    assert "pocolobby status my-team" in refused.value.message
    assert "runtime_handed_over" not in await sync(_actions)()
    await stream.disconnect()


async def test_hand_over_admits_the_waiting_conversation_and_fences_the_holder(lead, backend):
    stream, runtime, generation = await _holding(backend)
    waiting = new_runtime()
    await _refused(backend, waiting)
    await sync(_first_ask_earlier)(backend, 5)
    await _refused(backend, waiting)

    handed = await sync(operator.hand_over)("my-team", "backend", account="boss@example.com")
    assert (handed.runtime_id, handed.retired_runtime_id) == (waiting, runtime)
    # The holder's stream is closed as by a reset, and it can no longer act.
    error, code = await closed_with(stream)
    assert (error["code"], code) == ("runtime_retired", 4403)
    assert "handed backend over" in error["message"]
    holder = _as_runtime(backend, runtime, generation)
    assert (await _stale_write(holder))["error"]["code"] == "generation_superseded"
    sent = (await sync(lead.send)("backend", "for the new one", "h-1"))["message_id"]
    stale = RuntimeCaller(runtime, generation)
    with pytest.raises(BrokerError) as fenced:
        await sync(acknowledge_messages)(backend.agent, [sent], stale)
    assert fenced.value.code == "generation_superseded"
    comeback = await open_stream(backend.token, runtime)
    assert (await closed_with(comeback))[0]["code"] == "runtime_retired"

    # The waiting bridge's next ask is admitted: a new generation and its bootstrap.
    admitted = await open_stream(backend.token, waiting)
    welcome, notice = await bootstrapped(admitted)
    assert welcome["runtime_id"] == waiting and welcome["generation"] > generation
    assert _payload(notice)["backlog"]["message_ids"] == [sent]
    entry = await sync(_status_entry)("backend")
    assert (entry["runtime_id"], entry["waiting"]) == (waiting, None)
    events = await sync(
        lambda: list(
            AuditEvent.objects.filter(action__in=["runtime_handed_over", "runtime_claimed"])
            .order_by("pk")
            .values("action", "actor_kind", "account", "detail")
        )
    )()
    assert events[-2] == {
        "action": "runtime_handed_over",
        "actor_kind": "operator",
        "account": "boss@example.com",
        "detail": {"runtime_id": waiting, "retired_runtime_id": runtime},
    }
    assert events[-1]["action"] == "runtime_claimed"
    assert events[-1]["detail"]["runtime_id"] == waiting
    await admitted.disconnect()


async def test_hand_over_with_nothing_waiting_is_refused_and_changes_nothing(backend):
    stream, runtime, generation = await _holding(backend)
    with pytest.raises(BrokerError) as refused:
        await sync(operator.hand_over)("my-team", "backend")
    assert (refused.value.status, refused.value.code) == (409, "nothing_waiting")
    entry = await sync(_status_entry)("backend")
    assert (entry["runtime_id"], entry["runtime_generation"]) == (runtime, generation)
    await stream.send_json_to({"type": "heartbeat"})
    assert (await frame(stream))["type"] == "heartbeat"  # still connected
    await stream.disconnect()


async def test_a_waiting_conversation_is_admitted_when_the_holder_then_ends_cleanly(backend):
    stream, _, _ = await _holding(backend)
    waiting = new_runtime()
    await _refused(backend, waiting)
    await _release(stream)
    admitted = await open_stream(backend.token, waiting)  # its bridge's next ask
    welcome, _ = await bootstrapped(admitted)
    assert welcome["runtime_id"] == waiting
    entry = await sync(_status_entry)("backend")
    assert (entry["runtime_id"], entry["waiting"], entry["runtime_released_at"]) == (
        waiting,
        None,
        None,
    )
    await admitted.disconnect()


async def test_a_real_wait_is_audited_once_and_a_single_ask_is_not(backend):
    """The Activity page's hand-over events: a conversation that waited (once it asked
    again, not a health check's one ask; once per wait however often it asks), then the
    owner's hand over."""
    stream, runtime, _ = await _holding(backend)
    waiting = new_runtime()
    await _refused(backend, waiting)
    assert "runtime_waiting" not in await sync(_actions)()  # one ask is not a wait
    await sync(_first_ask_earlier)(backend, WAITING_CONFIRMED.total_seconds() + 1)
    await _refused(backend, waiting)
    await _refused(backend, waiting)
    waits = await sync(
        lambda: list(
            AuditEvent.objects.filter(action="runtime_waiting").values(
                "actor_kind", "agent_id", "lobby_name", "target", "detail"
            )
        )
    )()
    assert len(waits) == 1
    (wait,) = waits
    assert (wait["actor_kind"], wait["agent_id"], wait["lobby_name"]) == (
        "agent",
        "backend",
        "my-team",
    )
    assert (wait["target"], wait["detail"]["holder"]) == (waiting, runtime)
    await sync(operator.hand_over)("my-team", "backend", account="boss@example.com")
    actions = await sync(_actions)()
    assert actions.index("runtime_waiting") < actions.index("runtime_handed_over")
    await stream.disconnect()
