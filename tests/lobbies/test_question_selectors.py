"""Questions to the owner, derived from the messages (lobbies/question_selectors.py): which
messages count (kinds, reply_expected, only to `owner`), what answers one (the owner's reply
naming it, to its sender), and that other lobbies' questions never count."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from django.utils import timezone

from lobbies import question_selectors as questions
from lobbies.actions.owner_messages import send_owner_broadcast, send_owner_message
from lobbies.models import ActorKind, Kind, Lobby, Message
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db


def _owner_says(lobby: Lobby, to: str, key: str, reply_to: int | None = None) -> int:
    outcome = send_owner_message(
        lobby,
        to=to,
        content=f"owner says {key}",
        important=False,
        client_request_id=key,
        actor_kind=ActorKind.OPERATOR,
        reply_to=reply_to,
    )
    return outcome.message.pk


def _waiting(lobby: Lobby) -> list[int]:
    return [q.message_id for q in questions.waiting_questions(lobby.pk)]


def test_the_rule_in_python_and_in_the_query_agree(lobby: Lobby, backend: AgentClient) -> None:
    """Every kind (and none) with each reply_expected the send accepts: the alert hook's
    Python form and the selectors' query form pick the same messages."""
    cases = []
    for n, (kind, expected) in enumerate(
        itertools.product([None, *Kind.values], [None, True, False])
    ):
        if kind is None and expected is not None:
            continue  # refused by the send: reply_expected needs a kind
        options = {k: v for k, v in (("kind", kind), ("reply_expected", expected)) if v is not None}
        sent = backend.send("owner", f"case {n}", f"case-{n}", **options)
        cases.append(sent["message_id"])
    stored = Message.objects.filter(pk__in=cases)
    in_python = {m.pk for m in stored if questions.asks_owner(m.kind, m.reply_expected)}
    assert set(questions.question_states(cases)) == in_python
    assert set(stored.filter(questions.ASKS_OWNER).values_list("pk", flat=True)) == in_python
    # What the rule says, spelled out: question and request always; others when they say so.
    kinds = {(m.kind, m.reply_expected) for m in stored if m.pk in in_python}
    assert ("question", False) in kinds and ("request", False) in kinds
    assert ("notice", True) in kinds and ("notice", False) not in kinds
    assert (None, False) not in kinds


def test_a_question_waits_until_the_owner_replies_naming_it(
    lobby: Lobby, backend: AgentClient, lead: AgentClient
) -> None:
    asked = backend.send("owner", "Use SSO?", "q1", kind="question")["message_id"]
    told = backend.send("owner", "FYI: deployed", "n1", kind="notice")["message_id"]
    to_lead = backend.send("lead", "Use SSO?", "q2", kind="question")["message_id"]
    assert _waiting(lobby) == [asked]
    assert told not in _waiting(lobby) and to_lead not in _waiting(lobby)
    assert questions.waiting_counts([lobby.pk]) == {lobby.pk: 1}

    # The owner writing to the agent without naming the question answers nothing,
    _owner_says(lobby, "backend", "plain")
    # nor does a reply naming it sent to someone else, nor a broadcast.
    _owner_says(lobby, "lead", "elsewhere", reply_to=asked)
    send_owner_broadcast(
        lobby,
        content="all",
        important=False,
        client_request_id="all",
        actor_kind=ActorKind.OPERATOR,
    )
    assert _waiting(lobby) == [asked]
    assert questions.answered_questions(lobby.pk, timezone.now().replace(year=2000)) == []

    reply = _owner_says(lobby, "backend", "yes", reply_to=asked)
    assert _waiting(lobby) == []
    assert questions.waiting_counts([lobby.pk]) == {}
    (done,) = questions.answered_questions(lobby.pk, timezone.now().replace(year=2000))
    assert (done.message_id, done.answer.message_id if done.answer else None) == (asked, reply)
    assert done.answer and done.answer.content == "owner says yes"
    assert questions.question_states([asked, told, to_lead]) == {asked: reply}


def test_reply_expected_counts_and_disabled_senders_do_not_wait(
    lobby: Lobby, make_agent: Callable[..., AgentClient]
) -> None:
    ops = make_agent("ops")
    asked = ops.send("owner", "Report, but tell me", "r1", kind="report", reply_expected=True)
    assert _waiting(lobby) == [asked["message_id"]]
    ops.agent.enabled = False
    ops.agent.save(update_fields=["enabled"])
    assert _waiting(lobby) == []


def test_other_lobbies_questions_do_not_count(
    lobby: Lobby, make_agent: Callable[..., AgentClient]
) -> None:
    from lobbies.actions import operator

    other = operator.create_lobby("other-team")
    mine = make_agent("backend")
    theirs = make_agent("backend", lobby_name="other-team")
    asked = mine.send("owner", "Mine?", "m1", kind="question")["message_id"]
    theirs.send("owner", "Theirs?", "t1", kind="question")
    assert _waiting(lobby) == [asked]
    assert questions.waiting_counts([lobby.pk]) == {lobby.pk: 1}
    assert questions.waiting_counts([lobby.pk, other.pk]) == {lobby.pk: 1, other.pk: 1}
    # The other lobby's owner replying "to" this lobby's question id answers nothing here.
    theirs_asked = Message.objects.get(lobby=other, client_request_id="t1").pk
    _owner_says(other, "backend", "x", reply_to=theirs_asked)
    assert _waiting(lobby) == [asked] and _waiting(other) == []


def test_whether_a_question_is_answered_is_read_by_the_owner_reply_index(
    lobby: Lobby, backend: AgentClient
) -> None:
    """Migration 0023's partial index serves the "answered?" subquery (on SQLite, whose
    planner uses an index on any table size; PostgreSQL's prefers a scan of tiny tables)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "sqlite":
        pytest.skip("the plan is checked on SQLite")
    backend.send("owner", "Use SSO?", "q1", kind="question")
    with CaptureQueriesContext(connection) as queries:
        questions.waiting_questions(lobby.pk)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {queries[-1]['sql']}")
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "message_owner_reply" in plan, plan
