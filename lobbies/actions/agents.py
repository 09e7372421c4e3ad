"""What an agent says about itself: its status line and what it waits on from the owner."""

from __future__ import annotations

from django.utils import timezone

from lobbies.models import Agent
from lobbies.schemas import SetOwnerRequests, SetStatus


def set_status(agent: Agent, args: SetStatus) -> Agent:
    agent.status_line = args.status.strip()
    agent.status_updated_at = timezone.now() if agent.status_line else None
    agent.save(update_fields=["status_line", "status_updated_at"])
    return agent


def set_owner_requests(agent: Agent, args: SetOwnerRequests) -> Agent:
    """Replace the agent's owner requests; the broker never sets or clears them otherwise."""
    agent.owner_request_count = args.count
    agent.owner_request_line = args.line.strip()
    agent.owner_requests_updated_at = timezone.now() if args.count else None
    agent.save(
        update_fields=["owner_request_count", "owner_request_line", "owner_requests_updated_at"]
    )
    return agent
