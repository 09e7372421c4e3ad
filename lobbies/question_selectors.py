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

from lobbies.models import Agent, Kind, Message, Scope
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


def _answers(owner_pks: list[int]) -> QuerySet[Message]:
    """The owner's replies to the question in the outer query, earliest first."""
    return Message.objects.filter(
        sender_id__in=owner_pks,
        scope=Scope.DIRECT,
        reply_to=OuterRef("pk"),
        deliveries__recipient_id=OuterRef("sender_id"),
    ).order_by("created_at", "pk")


def _questions(owner_pks: list[int]) -> QuerySet[Any]:
    """Every question to these owner rows, with its first answer (if any) annotated."""
    answers = _answers(owner_pks)
    return (
        Message.objects.filter(
            ASKS_OWNER,
            deliveries__recipient_id__in=owner_pks,
            scope=Scope.DIRECT,
            cancelled_at__isnull=True,
            sender__isnull=False,
        )
        .annotate(
            answered=Exists(answers),
            answer_id=Subquery(answers.values("pk")[:1]),
            answer_content=Subquery(answers.values("content")[:1]),
            answer_at=Subquery(answers.values("created_at")[:1]),
        )
        .select_related("sender")
    )


def _question(m: Message) -> OwnerQuestion:
    answer_id = getattr(m, "answer_id", None)
    answer = (
        Answer(answer_id, getattr(m, "answer_content", ""), getattr(m, "answer_at", m.created_at))
        if answer_id is not None
        else None
    )
    return OwnerQuestion(m.pk, m.lobby_id, m.sender_name, m.kind, m.content, m.created_at, answer)


def waiting_questions(lobby_id: int) -> list[OwnerQuestion]:
    """The lobby's unanswered questions from enabled agents, longest waiting first."""
    owners = _owner_rows([lobby_id])
    if not owners:
        return []
    rows = (
        _questions(owners).filter(answered=False, sender__enabled=True).order_by("created_at", "pk")
    )
    return [_question(m) for m in rows]


def answered_questions(lobby_id: int, since: datetime, limit: int = 10) -> list[OwnerQuestion]:
    """Questions the owner answered since `since`, most recently answered first."""
    owners = _owner_rows([lobby_id])
    if not owners:
        return []
    rows = _questions(owners).filter(answered=True, answer_at__gte=since).order_by("-answer_at")
    return [_question(m) for m in rows[:limit]]


def waiting_counts(lobby_ids: Iterable[int]) -> dict[int, int]:
    """{lobby pk: unanswered questions from its enabled agents}; lobbies with none absent."""
    owners = _owner_rows(lobby_ids)
    if not owners:
        return {}
    rows = (
        _questions(owners)
        .filter(answered=False, sender__enabled=True)
        .values("lobby_id")
        .annotate(n=Count("pk", distinct=True))
        .order_by()
    )
    return {row["lobby_id"]: row["n"] for row in rows}


def is_question_to_owner(message_id: int) -> bool:
    """Whether a stored message is a question to its lobby's owner (answered or not)."""
    lobby_id = Message.objects.filter(pk=message_id).values_list("lobby_id", flat=True).first()
    owners = _owner_rows([lobby_id]) if lobby_id is not None else []
    return bool(owners) and _questions(owners).filter(pk=message_id).exists()


def question_states(message_ids: Iterable[int]) -> dict[int, int | None]:
    """{message id: the id of the owner's answer, or None} for those of these messages that
    are questions to the owner; the others are absent."""
    ids = list(message_ids)
    lobbies = set(Message.objects.filter(pk__in=ids).values_list("lobby_id", flat=True))
    owners = _owner_rows(lobbies)
    if not owners:
        return {}
    return dict(_questions(owners).filter(pk__in=ids).values_list("pk", "answer_id"))


def last_owner_messages(lobby_id: int) -> dict[str, datetime]:
    """{agent address: when the owner last wrote to it directly}, for "you replied N min ago"."""
    owners = _owner_rows([lobby_id])
    if not owners:
        return {}
    rows = (
        Message.objects.filter(sender_id__in=owners, scope=Scope.DIRECT)
        .values("deliveries__recipient__agent_id")
        .annotate(last=Max("created_at"))
        .order_by()
    )
    return {row["deliveries__recipient__agent_id"]: row["last"] for row in rows}
