"""An agent's permissions (the flags the operator grants), checked one way everywhere."""

from __future__ import annotations

from typing import Literal

from lobbies.errors import ErrorCode, forbidden
from lobbies.models import Agent

# What the operator grants an agent (a flag on its row; a team manifest lists these).
Grant = Literal["broadcast", "manage_rooms"]
# What a tool needs: a grant, or watch_agents (manage_rooms, or the owner's lobby setting that
# lets every agent watch), which is never granted on its own.
Permission = Literal[Grant, "watch_agents"]


def has_permission(agent: Agent, permission: Permission | None) -> bool:
    if permission is None:
        return True
    if permission == "watch_agents":
        return bool(agent.manage_rooms or agent.lobby.agents_may_watch)
    return bool(agent.broadcast if permission == "broadcast" else agent.manage_rooms)


def require_permission(agent: Agent, permission: Permission | None, operation: str) -> None:
    """Refuse `operation` (a tool's name) when the agent lacks the permission it needs."""
    if not has_permission(agent, permission):
        needed = (
            "the manage_rooms permission or the owner's setting that lets agents watch"
            if permission == "watch_agents"
            else f"the {permission} permission"
        )
        raise forbidden(ErrorCode.PERMISSION_REQUIRED, f"{operation} needs {needed}")
