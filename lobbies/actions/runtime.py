"""Runtime ownership: one conversation consumes an agent's inbox; generations fence old processes.

A newly started bridge process claims without a generation and gets a new one; a network
reconnect presents its generation and is refused once superseded; another conversation gets
`runtime_conflict` until the owner resets the binding. Socket loss never transfers ownership.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.errors import BrokerError, conflict
from lobbies.models import ActorKind, Agent, AuditAction, Checkpoint, Lobby, RetiredRuntime

RUNTIME_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class RuntimeCaller:
    """The runtime a request says it comes from (bridge headers); absent for plain clients."""

    runtime_id: str
    generation: int


@dataclass(frozen=True)
class Claim:
    agent: Agent
    generation: int
    started: bool  # a new generation: the process must bootstrap


def check_runtime_id(runtime_id: str) -> str:
    if not RUNTIME_ID.match(runtime_id or ""):
        raise BrokerError(400, "invalid_runtime", "the runtime id must be a lowercase UUID")
    return runtime_id


def claim_runtime(agent: Agent, runtime_id: str, generation: int | None) -> Claim:
    """Bind, resume or reconnect `runtime_id`; refuse anything that would take over silently."""
    check_runtime_id(runtime_id)
    with transaction.atomic():
        agent = Agent.objects.select_for_update().select_related("lobby").get(pk=agent.pk)
        if RetiredRuntime.objects.filter(agent=agent, runtime_id=runtime_id).exists():
            raise conflict(
                "runtime_retired",
                "the owner retired this conversation's binding; start a new conversation",
            )
        if agent.runtime_id is not None and agent.runtime_id != runtime_id:
            raise conflict(
                "runtime_conflict",
                f"another conversation holds {agent.agent_id}; the owner can hand it over with "
                f"`pocolobby agent reset-runtime {agent.lobby.name} {agent.agent_id}`",
            )
        if generation is not None:
            if agent.runtime_id != runtime_id or generation != agent.runtime_generation:
                raise conflict(
                    "generation_superseded",
                    f"generation {generation} was superseded by a newer process of this "
                    "conversation; this process must stop",
                )
            return Claim(agent, generation, started=False)
        resumed = agent.runtime_id == runtime_id
        now = timezone.now()
        agent.runtime_id = runtime_id
        agent.runtime_generation += 1
        agent.runtime_bound_at = now
        agent.backlog_sequence = Lobby.objects.values_list("message_sequence", flat=True).get(
            pk=agent.lobby_id
        )
        agent.backlog_bound_at = now
        agent.loaded_checkpoint_revision = None
        agent.bootstrap_nonce = secrets.token_urlsafe(12)
        agent.bootstrap_sent_at = None
        agent.bootstrap_attempts = 0
        agent.ready_at = None
        agent.notify_attempts = 0
        agent.notify_next_at = None
        agent.notification_attention_required = False
        agent.save(
            update_fields=[
                "runtime_id",
                "runtime_generation",
                "runtime_bound_at",
                "backlog_sequence",
                "backlog_bound_at",
                "loaded_checkpoint_revision",
                "bootstrap_nonce",
                "bootstrap_sent_at",
                "bootstrap_attempts",
                "ready_at",
                "notify_attempts",
                "notify_next_at",
                "notification_attention_required",
            ]
        )
        record_audit(
            ActorKind.AGENT,
            AuditAction.RUNTIME_RESUMED if resumed else AuditAction.RUNTIME_CLAIMED,
            lobby_name=agent.lobby.name,
            agent_id=agent.agent_id,
            target=agent.agent_id,
            detail={"runtime_id": runtime_id, "generation": agent.runtime_generation},
        )
    return Claim(agent, agent.runtime_generation, started=True)


def check_fence(agent: Agent, caller: RuntimeCaller | None) -> None:
    """Refuse a runtime-originated write from anything but the current generation.

    Call with a row read inside the write's transaction (select_for_update), so an owner
    reset or a newer process cannot slip in between the check and the write.
    """
    if caller is None:
        return
    if agent.runtime_id != caller.runtime_id or agent.runtime_generation != caller.generation:
        raise conflict(
            "generation_superseded",
            "this bridge process no longer holds the agent's runtime; its writes are refused",
        )


def ready(
    agent: Agent, nonce: str, caller: RuntimeCaller | None, checkpoint_revision: int | None = None
) -> Agent:
    """The session confirms its Channel reached the model by echoing the bootstrap nonce.

    With `checkpoint_revision` (what get_context showed), a checkpoint saved since then, for
    example by this session before ready, makes ready stale: the session reloads its context.
    """
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        check_fence(agent, caller)
        if not agent.bootstrap_nonce or not secrets.compare_digest(agent.bootstrap_nonce, nonce):
            raise conflict(
                "stale_nonce",
                "this nonce is not the current bootstrap's; read the latest bootstrap notice",
            )
        current = (
            Checkpoint.objects.filter(agent=agent).values_list("revision", flat=True).first() or 0
        )
        if checkpoint_revision is not None and current != checkpoint_revision:
            raise conflict(
                "stale_checkpoint",
                f"your checkpoint is at revision {current}, not {checkpoint_revision}: "
                "call get_context again, then ready with the revision it shows",
                revision=current,
            )
        now = timezone.now()
        agent.ready_at = now
        # What it says it loaded; without a revision, what it could have loaded.
        agent.loaded_checkpoint_revision = current
        agent.last_progress_at = now
        agent.notification_attention_required = False
        agent.notify_attempts = 0
        agent.save(
            update_fields=[
                "ready_at",
                "loaded_checkpoint_revision",
                "last_progress_at",
                "notification_attention_required",
                "notify_attempts",
            ]
        )
    return agent
