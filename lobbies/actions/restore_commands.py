"""The operator's two restore commands (seed section 9): entering restore mode and finishing it.

Entering it (`pocolobby restore BACKUP`, on the copy before it replaces the store) issues a new
broker incarnation, retires every restored runtime binding, revokes every restored token and
issues replacements. While it holds, agents are refused and the dispatcher's timers do not run
(lobbies/actions/restore.py keeps that state and its checks). Finishing it (`pocolobby restore
--finish`) first lets overdue timers catch up, then marks every copy still pending as uncertain
work, then reopens access: each agent's next bootstrap and get_context list that work, and
nothing is pushed again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.actions.operator import issue_credential, retire_runtime
from lobbies.actions.restore import broker_state, forget_reading
from lobbies.actions.schedules import deliver_due, run_schedules
from lobbies.errors import ErrorCode, conflict
from lobbies.models import (
    ActorKind,
    Agent,
    AuditAction,
    BrokerState,
    Credential,
    Delivery,
    DeliveryState,
    Enrollment,
    UncertainWork,
)
from lobbies.wire.facts import iso


@dataclass(frozen=True)
class Replacement:
    """A new token for a restored agent; written into its configuration, never stored."""

    lobby: str
    agent: str
    token: str


def enter_restore_mode(source: str, backup_taken_at: datetime | None) -> list[Replacement]:
    """Close the store: new incarnation, bindings retired, every token replaced. Audited."""
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
        # A backup's unredeemed enrolment codes would issue tokens past the restore's revocation.
        Enrollment.objects.filter(redeemed_at__isnull=True).delete()
        UncertainWork.objects.all().delete()
        replacements = []
        agents = Agent.objects.select_related("lobby").order_by("lobby__name", "agent_id")
        for agent in agents:
            retire_runtime(agent)
            Agent.objects.filter(pk=agent.pk).update(
                bootstrap_nonce="", bootstrap_sent_at=None, ready_at=None, notify_next_at=None
            )
            if agent.enabled:
                token = issue_credential(agent)
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
    with transaction.atomic():
        state = BrokerState.objects.select_for_update().filter(pk=1).first()
        if state is None or not state.restore_mode:
            raise conflict(ErrorCode.NOT_IN_RESTORE_MODE, "this broker is not in restore mode")
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
