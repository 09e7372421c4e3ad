from __future__ import annotations

from typing import Any

from django.utils import timezone

from lobbies.models import ActorKind, AuditAction, AuditEvent


def record_audit(
    actor_kind: ActorKind,
    action: AuditAction,
    *,
    lobby_name: str = "",
    agent_id: str = "",
    target: str = "",
    account: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Write one audit event; call inside the transaction of the change it records."""
    return AuditEvent.objects.create(
        actor_kind=actor_kind,
        action=action,
        lobby_name=lobby_name,
        agent_id=agent_id,
        target=target,
        account=account,
        detail=detail or {},
        created_at=timezone.now(),
    )
