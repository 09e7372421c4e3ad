"""Questions to the owner: what an agent asked the lobby's human owner, and whether the owner
answered. Derived from the messages alone, never from a flag a page sets.

The rule, in one place:

- A **question to the owner** is an accepted, uncancelled direct message delivered to the
  lobby's reserved `owner` row whose kind is `question` or `request`, or that says
  `reply_expected` (`asks_owner`, and `ASKS_OWNER` for queries: a test proves they agree).
- It is **answered** by the owner's direct message to the question's sender whose `reply_to`
  is the question's id: the reply box on a question sends exactly that. An owner message to
  the agent without `reply_to` (the reply box under the agent's own `set_owner_requests`
  line, a broadcast) answers no question: the owner may write about something else, and only
  the reply that names the question says it was answered.

The agent's own `set_owner_requests` line stays the agent's to clear; `last_owner_messages`
says when the owner last wrote to each agent, for the page's "you replied N min ago".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Subquery

from lobbies.models import Agent, Delivery, Kind, Message, Scope
from lobbies.names import OWNER_SENDER

QUESTION_KINDS = frozenset({Kind.QUESTION, Kind.REQUEST})

# The message's own part of the rule, for queries over messages.
ASKS_OWNER = Q(kind__in=sorted(QUESTION_KINDS)) | Q(reply_expected=True)


def asks_owner(kind: str | None, reply_expected: bool) -> bool:
    """The message's own part of the rule, for a message in hand (the send's alert hook)."""
    return kind in QUESTION_KINDS or reply_expected


@dataclass(frozen=True)
class Answer:
    message_id: int
    content: str
    at: datetime


@dataclass(frozen=True)
class OwnerQuestion:
    message_id: int
    lobby_id: int
    agent_id: str  # the sender's address
    kind: str | None
    content: str
    asked_at: datetime
    answer: Answer | None = None

    @property
    def answered(self) -> bool:
        return self.answer is not None


def _owner_rows(lobby_ids: Iterable[int]) -> list[int]:
    return list(
        Agent.objects.filter(lobby_id__in=list(lobby_ids), agent_id=OWNER_SENDER).values_list(
            "pk", flat=True
        )
    )


def _answers() -> QuerySet[Message]:
    """The owner's replies to the question in the outer query, earliest first: found by
    `message_owner_reply` (the owner's messages by `reply_to`), then whether each went to the
    question's sender (`delivery_unique`)."""
    to_sender = Delivery.objects.filter(
        message_id=OuterRef("pk"), recipient_id=OuterRef(OuterRef("sender_id"))
    )
    return (
        Message.objects.filter(
            sender_name=OWNER_SENDER, reply_to=OuterRef("pk"), scope=Scope.DIRECT
        )
        .filter(Exists(to_sender))
        .order_by("created_at", "pk")
    )


def _questions(owner_pks: list[int], among: set[int] | None = None) -> QuerySet[Any]:
    """Every question to these owner rows (or those `among` these message ids), with its
    first answer's id (None: unanswered). All of them are read from the owner rows'
    deliveries; a few named ones by their ids, their delivery to an owner row checked."""
    if among is None:
        rows = Message.objects.filter(deliveries__recipient_id__in=owner_pks)
    else:
        to_owner = Delivery.objects.filter(message_id=OuterRef("pk"), recipient_id__in=owner_pks)
        rows = Message.objects.filter(Exists(to_owner), pk__in=among)
    return rows.filter(
        ASKS_OWNER,
        scope=Scope.DIRECT,
        cancelled_at__isnull=True,
        sender__isnull=False,
    ).annotate(answer_id=Subquery(_answers().values("pk")[:1]))


def _question(m: Message, answer: Message | None = None) -> OwnerQuestion:
    return OwnerQuestion(
        m.pk,
        m.lobby_id,
        m.sender_name,
        m.kind,
        m.content,
        m.created_at,
        Answer(answer.pk, answer.content, answer.created_at) if answer is not None else None,
    )


SHOWN_FIELDS = ("pk", "lobby_id", "sender_name", "kind", "content", "created_at")


def waiting_questions(lobby_id: int, limit: int | None = None) -> list[OwnerQuestion]:
    """The lobby's unanswered questions from enabled agents, longest waiting first (the
    first `limit` of them, if given)."""
    owners = _owner_rows([lobby_id])
    if not owners:
        return []
    rows = (
        _questions(owners)
        .filter(answer_id__isnull=True, sender__enabled=True)
        .only(*SHOWN_FIELDS)
        .order_by("created_at", "pk")
    )
    return [_question(m) for m in (rows[:limit] if limit is not None else rows)]


def answered_questions(lobby_id: int, since: datetime, limit: int = 10) -> list[OwnerQuestion]:
    """Questions the owner answered since `since`, most recently answered first: the owner's
    recent replies that name a question (`message_sender_time`), each kept if it is that
    question's first answer."""
    owners = _owner_rows([lobby_id])
    if not owners:
        return []
    # A second reply to one question is rare: twice the rows shown finds `limit` first ones.
    replies = list(
        Message.objects.filter(sender_id__in=owners, created_at__gte=since, reply_to__isnull=False)
        .only(*SHOWN_FIELDS, "reply_to")
        .order_by("-created_at", "-pk")[: limit * 2]
    )
    if not replies:
        return []
    named = {r.reply_to for r in replies if r.reply_to is not None}
    asked = {m.pk: m for m in _questions(owners, among=named).only(*SHOWN_FIELDS)}
    shown = []
    for reply in replies:
        question = asked.get(reply.reply_to or 0)
        if question is not None and question.answer_id == reply.pk:
            shown.append(_question(question, reply))
    return shown[:limit]


def waiting_counts(lobby_ids: Iterable[int]) -> dict[int, int]:
    """{lobby pk: unanswered questions from its enabled agents}; lobbies with none absent."""
    owners = _owner_rows(lobby_ids)
    if not owners:
        return {}
    rows = (
        _questions(owners)
        .filter(answer_id__isnull=True, sender__enabled=True)
        .values("lobby_id")
        .annotate(n=Count("pk", distinct=True))
        .order_by()
    )
    return {row["lobby_id"]: row["n"] for row in rows}


def question_states(message_ids: Iterable[int]) -> dict[int, int | None]:
    """{message id: the id of the owner's answer, or None} for those of these messages that
    are questions to the owner; the others are absent."""
    ids = list(message_ids)
    lobbies = set(Message.objects.filter(pk__in=ids).values_list("lobby_id", flat=True))
    owners = _owner_rows(lobbies)
    if not owners:
        return {}
    return dict(_questions(owners, among=set(ids)).values_list("pk", "answer_id"))


def last_owner_messages(lobby_id: int, since: datetime) -> dict[str, datetime]:
    """{agent address: when the owner last wrote to it directly, since `since`}, for "you
    replied N min ago" (the owner's messages read by `message_sender_time`)."""
    owners = _owner_rows([lobby_id])
    if not owners:
        return {}
    rows = (
        Message.objects.filter(sender_id__in=owners, scope=Scope.DIRECT, created_at__gte=since)
        .values("deliveries__recipient__agent_id")
        .annotate(last=Max("created_at"))
        .order_by()
    )
    return {row["deliveries__recipient__agent_id"]: row["last"] for row in rows}
