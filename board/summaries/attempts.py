"""The summarizer's rules in the store, the same for every broker process: an attempt is
claimed before the model is called and settled after; the interval, the daily ceiling and
"unchanged" are read from the attempt rows.

A claim is one write transaction: the interval checked and the estimated cost reserved
against the ceiling as a `reserved` attempt row. A broker killed before it settles leaves
the reservation: it counts toward the interval and the ceiling at its estimate, and after
CLAIM_EXPIRES the next claim marks it failed, so a crash never buys a free run and never
holds a lobby for good.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import QuerySet, Sum
from django.utils import timezone

from board.models import AttemptOutcome, SummaryAttempt
from board.summaries.prices import DAILY_CEILING_USD, estimated_cost
from board.summaries.prompt import BuiltRequest
from lobbies.models import Lobby

log = logging.getLogger(__name__)

# Ten minutes by default (POCOLOBBY_SUMMARY_INTERVAL_SECONDS).
SUMMARY_INTERVAL = timedelta(seconds=settings.POCOLOBBY_SUMMARY_INTERVAL_SECONDS)
# A reservation older than this is a broker that died mid-attempt: one attempt takes at most
# the two-minute request timeout, so five minutes (the default,
# POCOLOBBY_SUMMARY_CLAIM_EXPIRES_SECONDS) leaves a wide margin.
CLAIM_EXPIRES = timedelta(seconds=settings.POCOLOBBY_SUMMARY_CLAIM_EXPIRES_SECONDS)
BROKER_STOPPED = "the broker stopped before the attempt was recorded; its estimated cost counts"

# Why no attempt was claimed: another run holds the lobby ("busy"), the last attempt is too
# recent ("interval"), the estimate would pass the ceiling, the lobby was deleted, or the
# store refused the write ("failed": nothing is paid then).
Refusal = Literal["busy", "interval", "ceiling", "gone", "failed"]


@dataclass(frozen=True)
class Claim:
    """A reserved attempt: its row in the store and the cost it holds against the ceiling."""

    pk: int
    estimate: Decimal


@dataclass(frozen=True)
class Settlement:
    """What a claimed attempt's row becomes once the model answered (or did not)."""

    outcome: AttemptOutcome
    finished_at: datetime
    error: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    summary: dict[str, object] | None = None


def stored_cost_since(lobby_id: int, since: datetime) -> Decimal:
    """What this lobby's stored attempts cost since `since` (a reservation at its estimate)."""
    total = SummaryAttempt.objects.filter(lobby_id=lobby_id, started_at__gt=since).aggregate(
        total=Sum("cost_usd")
    )["total"]
    return Decimal(total or 0)


def not_yet(
    attempts: QuerySet[SummaryAttempt], now: datetime
) -> Literal["busy", "interval"] | None:
    """ "busy" while the last attempt is a live reservation, "interval" while it started
    (a reservation too) less than the interval ago, else None."""
    last = attempts.order_by("-started_at").values_list("started_at", "outcome").first()
    if last is None:
        return None
    started, outcome = last
    if outcome == AttemptOutcome.RESERVED and now - started < CLAIM_EXPIRES:
        return "busy"
    return "interval" if now - started < SUMMARY_INTERVAL else None


def unchanged(lobby_id: int, built: BuiltRequest) -> bool:
    """Same input as the last good summary's, or as the last answer's (good or invalid: the
    model already answered it), or the last answer's input less messages lost since (expired
    or cancelled: a summary of nothing new is not paid for)."""
    answers = SummaryAttempt.objects.filter(lobby_id=lobby_id).order_by("-started_at")
    last_good = (
        answers.filter(outcome=AttemptOutcome.SUCCEEDED).values_list("input_hash", flat=True)
    ).first()
    if last_good == built.input_hash:
        return True
    last_answer = (
        answers.filter(outcome__in=[AttemptOutcome.SUCCEEDED, AttemptOutcome.INVALID])
        .values_list("input_hash", "base_hash", "message_ids")
        .first()
    )
    if last_answer is None:
        return False
    input_hash, base_hash, message_ids = last_answer
    if input_hash == built.input_hash:
        return True
    answered_ids = set(message_ids) if isinstance(message_ids, list) else set()
    return base_hash == built.base_hash and built.message_ids <= answered_ids


def claim(
    lobby_id: int, built: BuiltRequest, *, retry: bool, unstored: Decimal = Decimal(0)
) -> Claim | Refusal:
    """Reserve one attempt in the store, or say why not. `unstored`: what this process's
    attempts whose records wait to be stored cost beyond their reservations.

    One write transaction: on SQLite the atomic block is BEGIN IMMEDIATE, the store's one
    writer; on PostgreSQL the lobby's row lock (FOR NO KEY UPDATE: sends, which only
    reference the lobby, do not wait for it) orders claimers of one lobby. Under it:
    reservations past CLAIM_EXPIRES are marked failed (their estimate keeps counting), a
    live one means another run holds the lobby, the interval is checked (not for the run's
    own retry), and the estimate must fit under the day's ceiling.
    """
    estimate = estimated_cost(built)
    try:
        with transaction.atomic():
            locked = Lobby.objects.select_for_update(no_key=True).filter(pk=lobby_id)
            if locked.values_list("pk", flat=True).first() is None:
                return "gone"
            now = timezone.now()
            attempts = SummaryAttempt.objects.filter(lobby_id=lobby_id)
            attempts.filter(
                outcome=AttemptOutcome.RESERVED, started_at__lte=now - CLAIM_EXPIRES
            ).update(outcome=AttemptOutcome.FAILED, error=BROKER_STOPPED, finished_at=now)
            if attempts.filter(outcome=AttemptOutcome.RESERVED).exists():
                return "busy"
            if not retry and not_yet(attempts, now) is not None:
                return "interval"
            spent = stored_cost_since(lobby_id, now - timedelta(hours=24)) + unstored
            if spent + estimate > DAILY_CEILING_USD:
                return "ceiling"
            row = SummaryAttempt.objects.create(
                lobby_id=lobby_id,
                model=built.request.model,
                effort=built.request.effort,
                input_hash=built.input_hash,
                base_hash=built.base_hash,
                message_ids=sorted(built.message_ids),
                outcome=AttemptOutcome.RESERVED,
                cost_usd=estimate,
                started_at=now,
                finished_at=now,
            )
    except DatabaseError:
        log.exception("a summary attempt of lobby %s could not be reserved", lobby_id)
        return "failed"
    return Claim(row.pk, estimate)


def settle(
    lobby_id: int, claim: Claim, settlement: Settlement
) -> Literal["stored", "gone", "failed"]:
    """The claimed attempt's row gets its real outcome and cost ("gone": the lobby, and with
    it the row, was deleted meanwhile)."""
    try:
        with transaction.atomic():
            if not SummaryAttempt.objects.filter(pk=claim.pk).update(**asdict(settlement)):
                return "gone"
    except DatabaseError:
        log.exception("summary attempt of lobby %s could not be stored", lobby_id)
        return "failed"
    return "stored"
