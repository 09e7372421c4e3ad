"""Pushes and transport facts of many bridges recorded together (a broadcast to a team).

A broadcast wakes every recipient's socket at once; on the embedded store their pushes share
one write transaction (one commit, one fsync), each push in its own savepoint, and the facts
the bridges report back are written set-based in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone

from lobbies import push
from lobbies.actions.runtime import Claim, claim_runtime
from lobbies.models import Delivery, Notice
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team(make_agent: Callable[..., AgentClient]) -> list[AgentClient]:
    return [make_agent("lead", broadcast=True)] + [make_agent(f"dev-{n}") for n in range(4)]


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times this thread's connection committed."""
    counted: list[int] = []
    connection.ensure_connection()
    commit = connection._commit  # type: ignore[attr-defined]

    def counting() -> None:
        counted.append(1)
        commit()

    monkeypatch.setattr(connection, "_commit", counting)
    return counted


def _runtimes(team: list[AgentClient]) -> list[Claim]:
    return [claim_runtime(member.agent, str(uuid.uuid4()), None) for member in team[1:]]


def test_a_broadcasts_pushes_share_one_commit_and_each_gets_its_own_frame(
    team: list[AgentClient], commits: list[int]
) -> None:
    claims = _runtimes(team)
    for claim in claims:  # the bootstrap notices, out of the way
        push.bootstrap_frame(claim.agent.pk, claim.generation)
    sent = team[0].ok("broadcast", content="all hands", client_request_id="b-1")["message_id"]
    stale = (claims[0].agent.pk, claims[0].generation + 1)  # a superseded socket
    asks = [(c.agent.pk, c.generation) for c in claims] + [stale]
    commits.clear()
    answers = push.push_frames(asks)
    assert len(commits) == 1
    frames = [a for a in answers if isinstance(a, dict)]
    assert [f["message_ids"] for f in frames] == [[sent]] * len(claims)
    assert answers[-1] is None  # the stale generation is pushed nothing
    assert len({f["notice_id"] for f in frames}) == len(claims)
    pushed = Delivery.objects.filter(message_id=sent).values_list("pushed_generation", flat=True)
    assert set(pushed) == {c.generation for c in claims}
    # Asked again: nothing is due, and nothing is written.
    commits.clear()
    assert push.push_frames(asks[:-1]) == [None] * len(claims)
    assert commits == []


def test_a_push_that_fails_stays_its_sockets_and_the_others_are_recorded(
    team: list[AgentClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = _runtimes(team)
    for claim in claims:
        push.bootstrap_frame(claim.agent.pk, claim.generation)
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
    ids = iter([uuid.uuid4(), taken, uuid.uuid4(), uuid.uuid4()])
    monkeypatch.setattr(push.uuid, "uuid4", lambda: next(ids))
    answers = push.push_frames([(c.agent.pk, c.generation) for c in claims])
    assert isinstance(answers[1], Exception)
    assert [a["message_ids"] for a in answers if isinstance(a, dict)] == [[sent]] * 3
    pending = Delivery.objects.get(message_id=sent, recipient=broken.agent)
    assert pending.pushed_generation is None  # rolled back with its savepoint: pushed later


def test_transport_facts_are_recorded_per_notice_and_a_strangers_notice_is_ignored(
    team: list[AgentClient],
) -> None:
    claims = _runtimes(team)
    for claim in claims:
        push.bootstrap_frame(claim.agent.pk, claim.generation)
    sent = team[0].ok("broadcast", content="all hands", client_request_id="b-1")["message_id"]
    frames = push.push_frames([(c.agent.pk, c.generation) for c in claims])
    notice = [f["notice_id"] for f in frames if isinstance(f, dict)]
    both, received_only, written_only, untold = claims
    push.record_transport_facts(
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
    push.record_transport_facts([(both.agent.pk, both.generation, notice[0], "host_written")])
    assert Notice.objects.get(id=notice[0]).host_written_at == first
