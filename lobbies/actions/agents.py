"""What an agent says about itself: its status line and what it waits on from the owner."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from lobbies.actions.runtime import RuntimeCaller, check_fence
from lobbies.api.schemas import SetOwnerRequests, SetStatus
from lobbies.models import Agent


def set_status(agent: Agent, args: SetStatus, runtime: RuntimeCaller | None = None) -> Agent:
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        check_fence(agent, runtime)
        agent.status_line = args.status.strip()
        agent.status_updated_at = timezone.now() if agent.status_line else None
        agent.save(update_fields=["status_line", "status_updated_at"])
    return agent


def set_owner_requests(
    agent: Agent, args: SetOwnerRequests, runtime: RuntimeCaller | None = None
) -> Agent:
    """Replace the agent's owner requests; the broker never sets or clears them otherwise."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        check_fence(agent, runtime)
        agent.owner_request_count = args.count
        agent.owner_request_line = args.line.strip()
        agent.owner_requests_updated_at = timezone.now() if args.count else None
        agent.save(
            update_fields=["owner_request_count", "owner_request_line", "owner_requests_updated_at"]
        )
    return agent
