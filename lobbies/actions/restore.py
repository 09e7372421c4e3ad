"""Restore mode (seed section 9): a restored store acts on nothing until the operator says so.

Entering it (`pocolobby restore BACKUP`, on the copy before it replaces the store) issues a new
broker incarnation, retires every restored runtime binding, revokes every restored token and
issues replacements. While it holds, agents are refused (503 `restore_mode`) and the
dispatcher's timers do not run. Finishing it (`pocolobby restore --finish`) first lets overdue
timers catch up, then marks every copy still pending as uncertain work, then reopens access:
each agent's next bootstrap and get_context list that work, and nothing is pushed again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.errors import BrokerError, conflict
from lobbies.models import (
    ActorKind,
    Agent,
    AuditAction,
    BrokerState,
    Credential,
    Delivery,
    DeliveryState,
    UncertainWork,
)
from lobbies.wire import iso

# This process's last reading: True once the store was seen open. A store only enters restore
# mode while no broker serves it (the restore command refuses otherwise), so an open reading
# stays true for the life of the process and the hot path reads nothing.
_SEEN_OPEN: dict[str, bool] = {"open": False}


def broker_state() -> BrokerState:
    """The store's state row, created with a first incarnation on first use."""
    state = BrokerState.objects.filter(pk=1).first()
    if state is None:
        state, _ = BrokerState.objects.get_or_create(pk=1, defaults={"incarnation": uuid.uuid4()})
    return state


def access_closed() -> bool:
    """True while the store is in restore mode (read from the store until seen open)."""
    if _SEEN_OPEN["open"]:
        return False
    closed = BrokerState.objects.filter(pk=1, restore_mode=True).exists()
    _SEEN_OPEN["open"] = not closed
    return closed


def forget_reading() -> None:
    """Read the store again next time (after this process entered or left restore mode)."""
    _SEEN_OPEN["open"] = False


def check_open() -> None:
    if access_closed():
        raise BrokerError(
            503,
            "restore_mode",
            "this broker was restored from a backup and is closed to agents until its operator "
            "runs `pocolobby restore --finish`; use the configuration the operator sends you",
        )


def state_entry() -> dict[str, Any]:
    """What health and status show about this store's history."""
    state = broker_state()
    return {
        "incarnation": str(state.incarnation),
        "restore_mode": state.restore_mode,
        "restored_from": state.restored_from or None,
        "backup_taken_at": iso(state.backup_taken_at),
        "restored_at": iso(state.restored_at),
        "restore_finished_at": iso(state.finished_at),
    }


@dataclass(frozen=True)
class Replacement:
    """A new token for a restored agent; written into its configuration, never stored."""

    lobby: str
    agent: str
    token: str


def enter_restore_mode(source: str, backup_taken_at: datetime | None) -> list[Replacement]:
    """Close the store: new incarnation, bindings retired, every token replaced. Audited."""
    # local: operator imports rooms -> messages -> runtime, which imports this module
    from lobbies.actions.operator import _issue_credential, _retire_runtime

    with transaction.atomic():
        now = timezone.now()
        state = broker_state()
        state.incarnation = uuid.uuid4()
        state.restore_mode = True
        state.restored_from = source[-300:]
        state.backup_taken_at = backup_taken_at
        state.restored_at = now
        state.finished_at = None
        state.save()
        revoked = Credential.objects.filter(revoked_at__isnull=True).update(revoked_at=now)
        UncertainWork.objects.all().delete()
        replacements = []
        agents = Agent.objects.select_related("lobby").order_by("lobby__name", "agent_id")
        for agent in agents:
            _retire_runtime(agent)
            Agent.objects.filter(pk=agent.pk).update(
                bootstrap_nonce="", bootstrap_sent_at=None, ready_at=None, notify_next_at=None
            )
            if agent.enabled:
                token = _issue_credential(agent)
                replacements.append(Replacement(agent.lobby.name, agent.agent_id, token))
        record_audit(
            ActorKind.OPERATOR,
            AuditAction.RESTORE_STARTED,
            target=str(state.incarnation),
            detail={
                "restored_from": state.restored_from,
                "backup_taken_at": iso(backup_taken_at),
                "revoked_tokens": revoked,
                "new_tokens": len(replacements),
            },
        )
    forget_reading()
    return replacements


def finish_restore() -> dict[str, Any]:
    """Reopen access: overdue timers catch up, then every pending copy is marked uncertain."""
    # Local: schedules imports the send path, which this module's importers need not load.
    from lobbies.actions.schedules import deliver_due, run_schedules

    with transaction.atomic():
        state = BrokerState.objects.select_for_update().filter(pk=1).first()
        if state is None or not state.restore_mode:
            raise conflict("not_in_restore_mode", "this broker is not in restore mode")
        now = timezone.now()
        while deliver_due(now) >= 200:
            pass
        while run_schedules(now) >= 100:
            pass
        pending = Delivery.objects.filter(state=DeliveryState.PENDING).values_list(
            "recipient_id", "message_id"
        )
        UncertainWork.objects.bulk_create(
            [UncertainWork(agent_id=a, message_id=m, restored_at=now) for a, m in pending],
            ignore_conflicts=True,
        )
        uncertain = UncertainWork.objects.count()
        state.restore_mode = False
        state.finished_at = now
        state.save(update_fields=["restore_mode", "finished_at"])
        record_audit(
            ActorKind.OPERATOR,
            AuditAction.RESTORE_FINISHED,
            target=str(state.incarnation),
            detail={"uncertain": uncertain},
        )
    forget_reading()
    return {"finished": True, "incarnation": str(state.incarnation), "uncertain": uncertain}


def uncertain_message_ids(agent_pk: int) -> list[int]:
    """Copies this agent may already have acted on before the restore, still pending."""
    return list(
        UncertainWork.objects.filter(
            agent_id=agent_pk,
            message__deliveries__recipient_id=agent_pk,
            message__deliveries__state=DeliveryState.PENDING,
        )
        .order_by("message__sequence")
        .values_list("message_id", flat=True)
    )


def restore_entry(agent: Agent) -> dict[str, Any] | None:
    """get_context's account of a restore this session has not yet confirmed (ready)."""
    if not UncertainWork.objects.filter(agent=agent).exists():
        return None
    state = broker_state()
    return {
        "incarnation": str(state.incarnation),
        "backup_taken_at": iso(state.backup_taken_at),
        "restored_at": iso(state.restored_at),
        "uncertain_message_ids": uncertain_message_ids(agent.pk),
        "note": (
            "this broker was restored from a backup: these messages were pending then, and you "
            "(or an earlier session) may already have acted on them, and your checkpoint and "
            "acknowledgments may predate the backup. Check your work before repeating any of it."
        ),
    }


def settle_uncertain(agent_pk: int) -> None:
    """The session confirmed its bootstrap (ready): it has been told; stop listing the work."""
    UncertainWork.objects.filter(agent_id=agent_pk).delete()
