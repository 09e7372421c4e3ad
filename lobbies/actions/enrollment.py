"""Enrolment by code: the operator issues a one-time code for an agent, and `pocolobby join`
on the agent's machine redeems it for the agent's token, so no token file is carried by hand.

A code is stored only as its SHA-256, is single-use, expires, and a client network that
presents too many codes that are not live is refused for a while (429). Enrolling an agent
that already has a token revokes it at redemption, as `rotate` does.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.actions.operator import OPERATOR, agent_named, replace_credential
from lobbies.actions.restore import check_open
from lobbies.errors import BrokerError, ErrorCode
from lobbies.models import Agent, AuditAction, Enrollment
from lobbies.models import EnrollmentRefusal as Refusal

DEFAULT_MINUTES = 15
MAX_MINUTES = 7 * 24 * 60
# Wrong codes a client network may present in a window before it is refused until the
# window's oldest falls out; a code has 100 random bits, so this only bounds noise.
REFUSALS_PER_WINDOW = 10
REFUSAL_WINDOW = timedelta(minutes=10)

# Crockford's base32: no I, L, O or U, so a code read aloud or typed from a phone survives.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_GROUPS, _GROUP = 5, 4


def new_code() -> str:
    """`XXXX-XXXX-XXXX-XXXX-XXXX`: 100 random bits."""
    raw = "".join(secrets.choice(_ALPHABET) for _ in range(_GROUPS * _GROUP))
    return "-".join(raw[i : i + _GROUP] for i in range(0, len(raw), _GROUP))


def normalise_code(code: str) -> str:
    """The code as issued, whatever case and separators were typed."""
    return "".join(c for c in code.upper() if c.isalnum())


def code_hash(code: str) -> str:
    return hashlib.sha256(normalise_code(code).encode()).hexdigest()


@dataclass(frozen=True)
class Issued:
    code: str
    expires_at: datetime


def enroll_agent(lobby_name: str, agent_id: str, minutes: int = DEFAULT_MINUTES) -> Issued:
    """A fresh code for the agent; an earlier code not yet redeemed stops working."""
    if not 1 <= minutes <= MAX_MINUTES:
        raise BrokerError(
            400, ErrorCode.INVALID_ARGUMENTS, f"expires_minutes must be 1 to {MAX_MINUTES} (7 days)"
        )
    code = new_code()
    now = timezone.now()
    with transaction.atomic():
        agent = agent_named(lobby_name, agent_id)
        Enrollment.objects.filter(agent=agent, redeemed_at__isnull=True).delete()
        enrollment = Enrollment.objects.create(
            agent=agent,
            code_hash=code_hash(code),
            created_at=now,
            expires_at=now + timedelta(minutes=minutes),
        )
        record_audit(
            OPERATOR,
            AuditAction.ENROLLMENT_ISSUED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            detail={"expires_at": enrollment.expires_at.isoformat()},
        )
    return Issued(code, enrollment.expires_at)


@dataclass(frozen=True)
class Redeemed:
    agent: Agent
    token: str
    revoked: int


def _count_refusal(client: str, now: datetime) -> None:
    """A code that was not live, against the client's network (older ones swept here)."""
    Refusal.objects.filter(at__lt=now - REFUSAL_WINDOW).delete()
    Refusal.objects.create(client=client[:64], at=now)


def _check_not_guessing(client: str, now: datetime) -> None:
    recent = Refusal.objects.filter(client=client[:64], at__gte=now - REFUSAL_WINDOW)
    if recent.count() < REFUSALS_PER_WINDOW:
        return
    oldest = recent.order_by("at").values_list("at", flat=True).first() or now
    retry_after = max(1, math.ceil((oldest + REFUSAL_WINDOW - now).total_seconds()))
    raise BrokerError(
        429,
        ErrorCode.RATE_LIMITED,
        f"too many enrolment codes that were not live came from your network; try again in "
        f"{retry_after} s",
        retry_after=retry_after,
    )


def redeem_enrollment(code: str, client: str) -> Redeemed:
    """Issue the agent's token for a live code, once; a refusal says which kind of code it was
    (unknown, used, expired) and what to do. Nothing is issued on a refusal."""
    check_open()
    now = timezone.now()
    failure: BrokerError | None = None
    with transaction.atomic():
        _check_not_guessing(client, now)
        enrollment = (
            Enrollment.objects.select_for_update()
            .select_related("agent__lobby")
            .filter(code_hash=code_hash(code))
            .first()
        )
        if enrollment is None:
            failure = BrokerError(
                404,
                ErrorCode.UNKNOWN_CODE,
                "this enrolment code is not known to this broker: check it was copied whole "
                "and that --url names the broker that issued it",
            )
        elif enrollment.redeemed_at is not None:
            failure = BrokerError(
                409,
                ErrorCode.CODE_USED,
                "this enrolment code was already used; ask the operator for a new one "
                "(pocolobby agent enroll LOBBY NAME)",
            )
        elif enrollment.expires_at <= now:
            failure = BrokerError(
                410,
                ErrorCode.CODE_EXPIRED,
                "this enrolment code expired; ask the operator for a new one "
                "(pocolobby agent enroll LOBBY NAME)",
            )
        elif not enrollment.agent.enabled:
            failure = BrokerError(
                403, ErrorCode.AGENT_DISABLED, "this agent is disabled by the owner"
            )
        if failure is not None and failure.code != ErrorCode.AGENT_DISABLED:
            _count_refusal(client, now)
        if failure is None:
            assert enrollment is not None  # for mypy: every other case set `failure`
            agent = enrollment.agent
            token, revoked = replace_credential(agent, "the agent was enrolled with a new token")
            enrollment.redeemed_at = now
            enrollment.save(update_fields=["redeemed_at"])
            record_audit(
                OPERATOR,
                AuditAction.ENROLLMENT_REDEEMED,
                lobby_name=agent.lobby.name,
                agent_id=agent.agent_id,
                target=agent.agent_id,
                detail={"revoked": revoked},
            )
    # Raised after the commit, so the refusal's count is kept; nothing else was changed.
    if failure is not None:
        raise failure
    return Redeemed(agent, token, revoked)
