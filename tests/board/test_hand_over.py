"""The dashboard shows a new conversation waiting to take over an agent, and its owner (or
the local operator) hands the agent over with one tap: audited, fenced like a reset, and
refused to viewers, the public, other origins and when nothing waits."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from board.models import BoardConfig, Visibility
from lobbies.actions.runtime import RuntimeConflict, claim_runtime, wait_for_hand_over
from lobbies.models import Agent, AuditEvent, RetiredRuntime
from lobbies.push.presence import conversation_key
from tests.board.dashboard_helpers import LOCAL_HOST, connect, operator_client
from tests.board.test_replies import ORIGIN, _browser
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

WAITS = "A new conversation is waiting to take over <bdi>backend</bdi>"


def _holder(agent: AgentClient) -> str:
    runtime = str(uuid.uuid4())
    claim_runtime(agent.agent, runtime, None)
    Agent.objects.filter(pk=agent.agent.pk).update(runtime_first_ready_at=timezone.now())
    connect(agent.agent)
    return runtime


def _ask(agent: AgentClient, runtime: str) -> None:
    """A new conversation's bridge claims the agent and is refused, as the stream does it."""
    with pytest.raises(RuntimeConflict) as refused:
        claim_runtime(agent.agent, runtime, None)
    wait_for_hand_over(refused.value)


def _waiting(agent: AgentClient) -> str:
    """A new conversation that asked twice, a few seconds apart: it waits for a hand over."""
    runtime = str(uuid.uuid4())
    _ask(agent, runtime)
    Agent.objects.filter(pk=agent.agent.pk).update(
        waiting_since=timezone.now() - timedelta(seconds=6)
    )
    _ask(agent, runtime)
    return runtime


def _shown(client: Client, base: str = "") -> str:
    """The waiting conversation the page's Hand over form names, as the owner's phone sends it."""
    part = client.get(f"{base}/parts/waiting", secure=client.defaults["HTTP_HOST"] != LOCAL_HOST)
    return re.search(r'name="conversation" value="([0-9a-f]+)"', part.content.decode()).group(1)


def _hand_over(
    client: Client,
    agent: str = "backend",
    origin: str = ORIGIN,
    base: str = "",
    conversation: str = "0" * 16,
):
    return client.post(
        f"{base}/hand-over",
        data=json.dumps({"agent": agent, "conversation": conversation}),
        content_type="application/json",
        secure=client.defaults["HTTP_HOST"] != LOCAL_HOST,
        HTTP_ORIGIN=origin,
    )


def _refused(answer, status: int, words: str) -> None:
    assert answer.status_code == status, answer.content
    assert words in answer.json()["error"]["message"]
    assert not AuditEvent.objects.filter(action="runtime_handed_over").exists()


def test_the_owner_sees_the_wait_and_hands_over_and_it_is_audited(hosted, lobby, backend):
    holder = _holder(backend)
    waiting = _waiting(backend)
    owner = _browser("boss@example.com", lobby, "owner")
    part = owner.get("/parts/waiting", secure=True).content.decode()
    assert WAITS in part and "is connected now" in part
    assert 'action="/hand-over"' in part and ">Hand over</button>" in part
    assert waiting not in part  # the page names the conversation, not its runtime id

    answer = _hand_over(owner, conversation=_shown(owner))
    assert answer.status_code == 200, answer.content
    assert answer.json()["message"].startswith("Handed backend over")
    event = AuditEvent.objects.get(action="runtime_handed_over")
    assert (event.actor_kind, event.account, event.target) == (
        "account",
        "boss@example.com",
        "backend",
    )
    assert event.detail == {"runtime_id": waiting, "retired_runtime_id": holder}
    # Fenced like a reset: the holder is retired for good and its generation is over.
    assert RetiredRuntime.objects.filter(agent=backend.agent, runtime_id=holder).exists()
    backend.agent.refresh_from_db()
    assert backend.agent.runtime_id == waiting
    claim = claim_runtime(backend.agent, waiting, None)  # the waiting bridge's next ask
    assert claim.started
    assert WAITS not in owner.get("/parts/waiting", secure=True).content.decode()
    # Tapped twice: nothing waits any more, and the second tap says so.
    second = _hand_over(owner, conversation=conversation_key(waiting))
    assert second.status_code == 409 and "no new conversation is waiting" in second.content.decode()


def test_a_viewer_sees_the_wait_without_the_button_and_cannot_hand_over(hosted, lobby, backend):
    holder = _holder(backend)
    _waiting(backend)
    viewer = _browser("viewer@example.com", lobby, "viewer")
    page = viewer.get("/", secure=True).content.decode()
    assert WAITS in page and "/hand-over" not in page
    _refused(_hand_over(viewer), 403, "only this lobby's owner can hand an agent over")
    BoardConfig.objects.create(lobby=lobby, visibility=Visibility.PUBLIC, updated_at=timezone.now())
    _refused(_hand_over(Client(HTTP_HOST="my-team.pocolobby.test")), 403, "only this lobby's")
    backend.agent.refresh_from_db()
    assert backend.agent.runtime_id == holder


def test_another_origin_or_a_bad_form_is_refused_and_changes_nothing(hosted, lobby, backend):
    holder = _holder(backend)
    _waiting(backend)
    owner = _browser("boss@example.com", lobby, "owner")
    _refused(_hand_over(owner, origin="https://evil.example"), 403, "must be sent from")
    _refused(_hand_over(owner, origin=""), 403, "came from nowhere")
    _refused(_hand_over(owner, agent="ghost"), 404, "no agent 'ghost'")
    answer = owner.post(
        "/hand-over",
        data=json.dumps({"agent": "backend", "conversation": "x", "runtime": "x"}),
        content_type="application/json",
        secure=True,
        HTTP_ORIGIN=ORIGIN,
    )
    _refused(answer, 400, "runtime: not a field of this form")
    answer = owner.post(
        "/hand-over",
        data=json.dumps({"agent": "backend"}),
        content_type="application/json",
        secure=True,
        HTTP_ORIGIN=ORIGIN,
    )
    _refused(answer, 400, "conversation")
    backend.agent.refresh_from_db()
    assert backend.agent.runtime_id == holder


def test_a_single_ask_is_not_shown_and_cannot_be_handed_over(hosted, lobby, backend):
    """A health check (`claude mcp list`) asks once and exits; it must not look waiting."""
    holder = _holder(backend)
    _ask(backend, str(uuid.uuid4()))
    owner = _browser("boss@example.com", lobby, "owner")
    assert WAITS not in owner.get("/parts/waiting", secure=True).content.decode()
    _refused(_hand_over(owner), 409, "no new conversation is waiting to take over backend")
    backend.agent.refresh_from_db()
    assert backend.agent.runtime_id == holder


def test_the_local_operator_hands_over_on_a_local_broker(lobby, backend):
    _holder(backend)
    waiting = _waiting(backend)
    client = operator_client()
    shown = _shown(client, base="/my-team")
    answer = _hand_over(client, origin=f"http://{LOCAL_HOST}", base="/my-team", conversation=shown)
    assert answer.status_code == 200, answer.content
    event = AuditEvent.objects.get(action="runtime_handed_over")
    assert (event.actor_kind, event.target) == ("operator", "backend")
    backend.agent.refresh_from_db()
    assert backend.agent.runtime_id == waiting


def test_a_hand_over_names_the_conversation_shown_and_is_refused_once_another_waits(
    hosted, lobby, backend
):
    """The latest conversation to ask is the one waiting: if another asked since the page
    showed the first, the owner's tap is refused and nothing changes; the page then shows
    the new one, and a tap on it hands over to that one."""
    holder = _holder(backend)
    first = _waiting(backend)
    owner = _browser("boss@example.com", lobby, "owner")
    seen = _shown(owner)
    assert seen == conversation_key(first)
    newer = _waiting(backend)  # another new conversation asks meanwhile

    answer = _hand_over(owner, conversation=seen)
    _refused(answer, 409, "another conversation is waiting to take over backend than the one")
    assert answer.json()["error"]["code"] == "waiting_changed"
    backend.agent.refresh_from_db()
    assert (backend.agent.runtime_id, backend.agent.waiting_runtime_id) == (holder, newer)
    assert not RetiredRuntime.objects.filter(agent=backend.agent).exists()

    answer = _hand_over(owner, conversation=_shown(owner))
    assert answer.status_code == 200, answer.content
    assert answer.json()["runtime_id"] == newer
