"""Pushes and transport facts of many bridges recorded together (a broadcast to a team).

A broadcast wakes every recipient's socket at once; on the embedded store their pushes share
one write transaction (one commit, one fsync), each push in its own savepoint, and the facts
the bridges report back are written set-based in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from django.test import override_settings
from django.utils import timezone

from lobbies.actions.runtime import Claim, claim_runtime
from lobbies.models import Agent, Delivery, Notice
from lobbies.push import frames
from pocolobby.config import Bounds
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team(make_agent: Callable[..., AgentClient]) -> list[AgentClient]:
    return [make_agent("lead", broadcast=True)] + [make_agent(f"dev-{n}") for n in range(4)]


def _runtimes(team: list[AgentClient]) -> list[Claim]:
    return [claim_runtime(member.agent, str(uuid.uuid4()), None) for member in team[1:]]


def test_a_broadcasts_pushes_share_one_commit_and_each_gets_its_own_frame(
    team: list[AgentClient], commits: list[int]
) -> None:
    claims = _runtimes(team)
    for claim in claims:  # the bootstrap notices, out of the way
        frames.bootstrap_frame(claim.agent.pk, claim.generation)
    sent = team[0].ok("broadcast", content="all hands", client_request_id="b-1")["message_id"]
    stale = (claims[0].agent.pk, claims[0].generation + 1)  # a superseded socket
    asks = [(c.agent.pk, c.generation) for c in claims] + [stale]
    commits.clear()
    answers = frames.push_frames(asks)
    assert len(commits) == 1
    sent_frames = [a for a in answers if isinstance(a, dict)]
    assert [f["message_ids"] for f in sent_frames] == [[sent]] * len(claims)
    assert answers[-1] is None  # the stale generation is pushed nothing
    assert len({f["notice_id"] for f in sent_frames}) == len(claims)
    pushed = Delivery.objects.filter(message_id=sent).values_list("pushed_generation", flat=True)
    assert set(pushed) == {c.generation for c in claims}
    # Asked again: nothing is due, and nothing is written.
    commits.clear()
    assert frames.push_frames(asks[:-1]) == [None] * len(claims)
    assert commits == []


def test_a_push_that_fails_stays_its_sockets_and_the_others_are_recorded(
    team: list[AgentClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = _runtimes(team)
    for claim in claims:
        frames.bootstrap_frame(claim.agent.pk, claim.generation)
    sent = team[0].ok("broadcast", content="all hands", client_request_id="b-1")["message_id"]
    broken = claims[1]
    # A notice row already holding the id the push would take: its insert fails.
    taken = uuid.uuid4()
    Notice.objects.create(
        id=taken,
        agent=broken.agent,
        runtime_id=broken.agent.runtime_id or "",
        generation=broken.generation,
        kind="hint",
        created_at=timezone.now(),
    )
    # The set-based batch takes four ids and fails on the taken one; each push then runs
    # again in its own savepoint with four more, and only the second fails again.
    ids = iter([uuid.uuid4(), taken, uuid.uuid4(), uuid.uuid4()] * 2)
    monkeypatch.setattr(frames.uuid, "uuid4", lambda: next(ids))
    answers = frames.push_frames([(c.agent.pk, c.generation) for c in claims])
    assert isinstance(answers[1], Exception)
    assert [a["message_ids"] for a in answers if isinstance(a, dict)] == [[sent]] * 3
    pending = Delivery.objects.get(message_id=sent, recipient=broken.agent)
    assert pending.pushed_generation is None  # rolled back with its savepoint: pushed later


def test_a_batch_pushes_each_agent_its_own_messages_important_first_and_defers_one_over_its_cap(
    team: list[AgentClient],
) -> None:
    lead, first, second, capped, _ = team
    claims = {c.agent.pk: c for c in _runtimes(team)}
    for claim in claims.values():
        frames.bootstrap_frame(claim.agent.pk, claim.generation)
    info = lead.ok("send_message", to="dev-0", content="when you can", client_request_id="i")
    urgent = lead.ok(
        "send_message", to="dev-0", content="now", priority="important", client_request_id="u"
    )
    only = lead.ok("send_message", to="dev-1", content="yours", client_request_id="y")
    held = lead.ok("send_message", to="dev-2", content="over the cap", client_request_id="h")
    ask = {m.agent.pk: (m.agent.pk, claims[m.agent.pk].generation) for m in team[1:]}
    with override_settings(BOUNDS=Bounds(notices_per_minute=1)):
        # dev-2 already had its one notice of the minute (its bootstrap is not counted).
        Notice.objects.create(
            id=uuid.uuid4(),
            agent=capped.agent,
            runtime_id=claims[capped.agent.pk].agent.runtime_id or "",
            generation=claims[capped.agent.pk].generation,
            kind="messages",
            created_at=timezone.now(),
        )
        duplicate = ask[first.agent.pk]  # a second socket of the same runtime
        answers = frames.push_frames(
            [ask[first.agent.pk], ask[second.agent.pk], ask[capped.agent.pk], duplicate]
        )
    to_first, to_second, to_capped, to_duplicate = answers
    assert isinstance(to_first, dict) and isinstance(to_second, dict)
    assert to_first["message_ids"] == [urgent["message_id"], info["message_id"]]
    assert to_first["meta"]["agent_id"] == "dev-0" and to_first["meta"]["priority"] == "important"
    assert to_second["message_ids"] == [only["message_id"]] and "yours" in to_second["content"]
    assert to_second["meta"]["agent_id"] == "dev-1"
    assert isinstance(to_capped, frames.Deferred) and 0 < to_capped.seconds <= 60
    assert to_duplicate is None  # the first socket of the runtime was pushed them
    still = Delivery.objects.get(message_id=held["message_id"])
    assert still.pushed_generation is None and still.state == "pending"
    stored = Notice.objects.get(id=to_first["notice_id"])
    assert stored.message_ids == to_first["message_ids"] and stored.kind == "messages"
    assert Agent.objects.get(pk=first.agent.pk).notify_next_at is not None


def test_a_batch_pushes_at_most_200_messages_to_an_agent_and_the_rest_next(
    team: list[AgentClient],
) -> None:
    lead, dev, *_ = team
    claim = claim_runtime(dev.agent, str(uuid.uuid4()), None)
    frames.bootstrap_frame(claim.agent.pk, claim.generation)
    with override_settings(BOUNDS=Bounds(sends_per_minute=1000)):
        sent = [
            lead.ok("send_message", to="dev-0", content=f"n{n}", client_request_id=f"m{n}")
            for n in range(205)
        ]
    first = frames.push_frames([(dev.agent.pk, claim.generation)])[0]
    assert isinstance(first, dict)
    assert first["message_ids"] == [m["message_id"] for m in sent[:200]]
    rest = frames.push_frames([(dev.agent.pk, claim.generation)])[0]
    assert isinstance(rest, dict)
    assert rest["message_ids"] == [m["message_id"] for m in sent[200:]]


def test_transport_facts_are_recorded_per_notice_and_a_strangers_notice_is_ignored(
    team: list[AgentClient],
) -> None:
    claims = _runtimes(team)
    for claim in claims:
        frames.bootstrap_frame(claim.agent.pk, claim.generation)
    sent = team[0].ok("broadcast", content="all hands", client_request_id="b-1")["message_id"]
    sent_frames = frames.push_frames([(c.agent.pk, c.generation) for c in claims])
    notice = [f["notice_id"] for f in sent_frames if isinstance(f, dict)]
    both, received_only, written_only, untold = claims
    frames.record_transport_facts(
        [
            (both.agent.pk, both.generation, notice[0], "received"),
            (both.agent.pk, both.generation, notice[0], "host_written"),
            (received_only.agent.pk, received_only.generation, notice[1], "received"),
            (written_only.agent.pk, written_only.generation, notice[2], "host_written"),
            # Another agent naming untold's notice: not its notice, nothing recorded.
            (both.agent.pk, both.generation, notice[3], "host_written"),
        ]
    )

    def facts(claim: Claim) -> tuple[bool, bool, int | None]:
        d = Delivery.objects.get(message_id=sent, recipient=claim.agent)
        return (
            d.adapter_received_at is not None,
            d.notification_attempted_at is not None,
            d.notified_generation,
        )

    assert facts(both) == (True, True, both.generation)
    assert facts(received_only) == (True, False, None)
    assert facts(written_only) == (False, True, written_only.generation)
    assert facts(untold) == (False, False, None)
    notice = [str(uuid.UUID(n)) for n in notice]
    stored = {str(n.id): n for n in Notice.objects.filter(id__in=notice)}
    assert stored[notice[0]].received_at and stored[notice[0]].host_written_at
    assert stored[notice[1]].received_at and stored[notice[1]].host_written_at is None
    assert stored[notice[2]].received_at is None and stored[notice[2]].host_written_at
    assert stored[notice[3]].received_at is None and stored[notice[3]].host_written_at is None
    # A fact stated again keeps the first time the notice was marked.
    first = stored[notice[0]].host_written_at
    frames.record_transport_facts([(both.agent.pk, both.generation, notice[0], "host_written")])
    assert Notice.objects.get(id=notice[0]).host_written_at == first
