"""When a lobby's summary runs: `maybe_summarize`, called by the dashboard's background
work (board/refresh.py), and what one process remembers between dashboard opens.

Every rule that decides whether the lobby pays is the store's (board/summaries/attempts.py).
What this process keeps is either a shortcut that can only skip work (`unchanged_until`: an
input found unchanged is not built again for a notes interval, unless this process stored
new notes) or what only it can know: that the ceiling stopped its last try (the page also
says so on every broker once the store's spend leaves no room for the cheapest attempt),
and a paid attempt whose record could not be stored yet (it waits here, its reservation
holds its estimate in the store, and this process pays for nothing more until it is stored:
only what it cost beyond that estimate is unknown to the other brokers).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from django.conf import settings
from django.utils import timezone

from board.models import AttemptOutcome, SummaryAttempt
from board.notes import NOTES_INTERVAL
from board.summaries import answer, attempts, client
from board.summaries.attempts import Claim, Settlement
from board.summaries.prices import DAILY_CEILING_USD, least_cost
from board.summaries.prompt import BuiltRequest, build_request
from lobbies.models import Lobby

if TYPE_CHECKING:  # the SDK takes about a second of every broker's start: only its types here
    from anthropic.types import Message

log = logging.getLogger(__name__)

MISSING_KEY = "ANTHROPIC_API_KEY is not set: summaries cannot be written"
CEILING_REACHED = (
    f"Summaries paused: this lobby reached its ${DAILY_CEILING_USD} daily ceiling; the last good "
    "picture stays."
)
CEILING_LOGGED = "summaries of lobby %s paused: its attempts reached the $%s daily ceiling"
UNSAVED_ATTEMPT = (
    "A summary attempt could not be recorded; summaries wait until its cost is stored."
)
ERROR_CHARS = 300  # the attempt row's error column

SummaryStatus = Literal[
    "busy",  # another summary of this lobby is running (a live reservation, any process)
    "blocked",  # a paid attempt's record is still unstored
    "no_key",
    "interval",  # the last attempt is too recent
    "unchanged",
    "no_agents",
    "ceiling",
    "gone",  # the lobby was deleted
    "succeeded",
    "failed",
    "invalid",
]


@dataclass
class _Memory:
    """What this process remembers of one lobby's summaries between dashboard opens."""

    unchanged_until: datetime | None = None
    paused_at: datetime | None = None  # the ceiling stopped the last try
    # Settled attempts whose records could not be stored yet, with their claims.
    unsaved: list[tuple[Claim, Settlement]] = field(default_factory=list)

    def unstored_cost(self) -> Decimal:
        """What the unstored attempts cost beyond the reservations the store holds."""
        return sum((max(s.cost_usd - c.estimate, Decimal(0)) for c, s in self.unsaved), Decimal(0))


_lock = threading.Lock()
_memory: dict[int, _Memory] = {}


def _memory_of(lobby_id: int) -> _Memory:
    with _lock:
        return _memory.setdefault(lobby_id, _Memory())


def forget(lobby_id: int | None = None) -> None:
    """Drop what this process remembers (one lobby, or all: for tests and a deleted lobby)."""
    with _lock:
        if lobby_id is None:
            _memory.clear()
        else:
            _memory.pop(lobby_id, None)


def notes_changed(lobby_id: int) -> None:
    """A fetch stored new notes: the input must be built again on the next open."""
    _memory_of(lobby_id).unchanged_until = None


def problems(lobby_id: int, spent_last_day: Decimal) -> list[str]:
    """The page's plain problems of the summarizer: an attempt's cost this process could not
    store, and the ceiling: the last try here was stopped by it, or (the same on every
    broker) the day's spend leaves no room for even the answer of the cheapest request."""
    memory = _memory.get(lobby_id)
    found = []
    if memory is not None and memory.unsaved:
        found.append(UNSAVED_ATTEMPT)
    paused = memory is not None and memory.paused_at is not None
    if paused or spent_last_day + least_cost(lobby_id) > DAILY_CEILING_USD:
        found.append(CEILING_REACHED)
    return found


def cost_since(lobby_id: int, since: datetime) -> Decimal:
    """What this lobby's summary attempts cost since `since`: stored (a reservation at its
    estimate), and what an unstored record cost beyond its reservation."""
    memory = _memory.get(lobby_id)
    unstored = memory.unstored_cost() if memory else Decimal(0)
    return attempts.stored_cost_since(lobby_id, since) + unstored


def maybe_summarize(lobby: Lobby) -> SummaryStatus:
    """Summarize this lobby if the rules say so; runs in the caller's thread, never raises.

    One run at a time per lobby is the store's rule (`attempts.claim`), whichever process
    or thread asks; the dashboard loop (board/refresh.py) also runs one refresh per lobby
    at a time in a process.
    """
    try:
        return _maybe(lobby.pk)
    except Exception:
        log.exception("summary of lobby %s failed unexpectedly", lobby.pk)
        return "failed"


def _maybe(lobby_id: int) -> SummaryStatus:
    memory = _memory_of(lobby_id)
    if memory.unsaved and not _store_unsaved(lobby_id, memory):
        return "blocked"
    if not settings.ANTHROPIC_API_KEY:
        return "no_key"
    now = timezone.now()
    # A first look without the lock, so a page polling every 10 s builds nothing; the claim
    # decides under the lock.
    early = attempts.not_yet(SummaryAttempt.objects.filter(lobby_id=lobby_id), now)
    if early is not None:
        return early
    if memory.unchanged_until is not None and now < memory.unchanged_until:
        return "unchanged"
    built = build_request(lobby_id)
    if built is None:
        forget(lobby_id)
        return "gone"
    if not built.agent_ids:
        memory.unchanged_until = now + NOTES_INTERVAL
        return "no_agents"
    if attempts.unchanged(lobby_id, built):
        memory.unchanged_until = now + NOTES_INTERVAL
        return "unchanged"
    memory.unchanged_until = None
    status: SummaryStatus = "failed"
    for attempt_number in (1, 2):
        claim = attempts.claim(
            lobby_id, built, retry=attempt_number == 2, unstored=memory.unstored_cost()
        )
        if not isinstance(claim, Claim):
            if claim == "ceiling":
                if memory.paused_at is None:
                    log.warning(CEILING_LOGGED, lobby_id, DAILY_CEILING_USD)
                memory.paused_at = timezone.now()
            elif claim == "gone":
                forget(lobby_id)
            return claim
        memory.paused_at = None
        status, retry = _attempt(lobby_id, built, memory, claim)
        if not retry or attempt_number == 2:
            break
    return status


def _attempt(
    lobby_id: int, built: BuiltRequest, memory: _Memory, claim: Claim
) -> tuple[SummaryStatus, bool]:
    """Call the model once and settle the claimed attempt; (status, worth one retry)."""
    answered = client.ask(built.request)
    retry = False
    if isinstance(answered, client.CallFailed):
        settlement = Settlement(AttemptOutcome.FAILED, timezone.now(), error=answered.error)
        retry = answered.retry
    else:
        settlement = _settlement(answered, built)
    settlement = replace(settlement, error=settlement.error[:ERROR_CHARS])
    stored = attempts.settle(lobby_id, claim, settlement)
    if stored == "gone":
        forget(lobby_id)
        return "gone", False
    if stored == "failed":
        memory.unsaved.append((claim, settlement))  # its reservation stays until it is stored
        return _status(settlement.outcome), False
    return _status(settlement.outcome), retry


def _settlement(message: Message, built: BuiltRequest) -> Settlement:
    """The judged answer; an answer the SDK let through without the fields every Messages
    API answer has is unusable, and is recorded as such rather than left reserved."""
    try:
        judged = answer.judge(message, built)
    except (AttributeError, TypeError, ValueError) as error:
        return Settlement(
            AttemptOutcome.FAILED,
            timezone.now(),
            error=f"the Anthropic API's answer was unusable ({type(error).__name__})",
        )
    return Settlement(
        judged.outcome,
        timezone.now(),
        error=judged.error,
        input_tokens=judged.input_tokens,
        output_tokens=judged.output_tokens,
        cost_usd=judged.cost_usd,
        summary=judged.summary,
    )


def _status(outcome: AttemptOutcome) -> SummaryStatus:
    if outcome == AttemptOutcome.SUCCEEDED:
        return "succeeded"
    if outcome == AttemptOutcome.INVALID:
        return "invalid"
    return "failed"


def _store_unsaved(lobby_id: int, memory: _Memory) -> bool:
    """Settle the attempts that waited in memory, oldest first; True when none is left."""
    while memory.unsaved:
        claim, settlement = memory.unsaved[0]
        if attempts.settle(lobby_id, claim, settlement) == "failed":
            return False
        memory.unsaved.pop(0)
    return True
