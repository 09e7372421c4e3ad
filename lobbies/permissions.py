"""An agent's permissions (the flags the operator grants), checked one way everywhere."""

from __future__ import annotations

from typing import Literal

from lobbies.errors import forbidden
from lobbies.models import Agent

Permission = Literal["broadcast", "manage_rooms"]


def has_permission(agent: Agent, permission: Permission | None) -> bool:
    if permission is None:
        return True
    return bool(agent.broadcast if permission == "broadcast" else agent.manage_rooms)


def require_permission(agent: Agent, permission: Permission | None, operation: str) -> None:
    """Refuse `operation` (a tool's name) when the agent lacks the permission it needs."""
    if not has_permission(agent, permission):
        raise forbidden("permission_required", f"{operation} needs the {permission} permission")
