"""Pushes for many sockets at once (a broadcast's fan-out) in one write transaction."""

from __future__ import annotations

import pytest

from lobbies import push
from lobbies.actions.messages import send_message
from lobbies.actions.runtime import claim_runtime
from lobbies.models import Delivery, Notice
from lobbies.schemas import SendMessage
from tests.lobbies.stream import new_runtime

pytestmark = pytest.mark.django_db(transaction=True)


def _bound(client) -> int:
    """A running bridge's generation for the agent."""
    return claim_runtime(client.agent, new_runtime(), None).generation


def test_each_socket_of_a_batch_gets_its_own_frame(lead, backend, make_agent):
    frontend, idle = make_agent("frontend"), make_agent("idle")
    generations = {c.agent.agent_id: _bound(c) for c in (backend, frontend, idle)}
    sent = {}
    for client in (backend, frontend):
        args = SendMessage(
            to=client.agent.agent_id,
            content="release at six",
            client_request_id=f"r-{client.agent.agent_id}",
        )
        sent[client.agent.agent_id] = send_message(lead.agent, args).message.pk
    sockets = [
        (backend.agent.pk, generations["backend"]),
        (idle.agent.pk, generations["idle"]),  # nothing due
        (frontend.agent.pk, generations["frontend"] + 1),  # a superseded generation
        (frontend.agent.pk, generations["frontend"]),
    ]
    frames = push.push_frames(sockets)
    assert frames[1] is None and frames[2] is None
    for frame, name in ((frames[0], "backend"), (frames[3], "frontend")):
        assert isinstance(frame, dict) and frame["message_ids"] == [sent[name]]
        notice = Notice.objects.get(id=frame["notice_id"])
        assert (notice.agent.agent_id, notice.generation) == (name, generations[name])
    pushed = Delivery.objects.filter(message_id__in=sent.values())
    assert sorted(pushed.values_list("pushed_generation", flat=True)) == sorted(
        [generations["backend"], generations["frontend"]]
    )
    assert push.push_frames(sockets) == [None, None, None, None]  # nothing due twice
