"""Continuity: the owner's role for an agent and the agent's own checkpoint."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.actions.operator import agent_named
from lobbies.actions.receipts import AcknowledgeOutcome, acknowledge_in_transaction
from lobbies.actions.runtime import RuntimeCaller, check_fence
from lobbies.api.schemas import SaveCheckpoint
from lobbies.errors import BrokerError, ErrorCode, bad_request, conflict
from lobbies.models import ActorKind, Agent, AuditAction, Checkpoint

MAX_ROLE_CHARS = 32_768


def save_checkpoint(
    agent: Agent, args: SaveCheckpoint, runtime: RuntimeCaller | None
) -> tuple[Checkpoint, AcknowledgeOutcome | None]:
    """Compare-and-swap the checkpoint, with optional receipts, in one transaction.

    Only the agent's current runtime writes it: peers cannot (the token is the agent's own),
    and a superseded process cannot (the generation is checked under the row lock).
    """
    if runtime is None:
        raise BrokerError(
            409,
            ErrorCode.RUNTIME_REQUIRED,
            "save_checkpoint is written by the agent's bridge: send X-PocoLobby-Runtime and "
            "X-PocoLobby-Generation",
        )
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        check_fence(agent, runtime)
        acknowledged = None
        if args.acknowledge_message_ids:
            acknowledged = acknowledge_in_transaction(agent, args.acknowledge_message_ids)
        current = Checkpoint.objects.select_for_update().filter(agent=agent).first()
        revision = current.revision if current else 0
        if args.expected_revision != revision:
            raise conflict(
                ErrorCode.CHECKPOINT_CONFLICT,
                f"your checkpoint is at revision {revision}, not {args.expected_revision}; "
                "read it (read_checkpoint), merge, and save against that revision",
                revision=revision,
            )
        if args.covers_receipts_through > agent.receipt_sequence:
            raise bad_request(
                f"covers_receipts_through is {args.covers_receipts_through} but your latest "
                f"receipt is {agent.receipt_sequence}: a checkpoint covers only receipts that "
                "exist"
            )
        now = timezone.now()
        checkpoint, _ = Checkpoint.objects.update_or_create(
            agent=agent,
            defaults={
                "revision": revision + 1,
                "body": args.checkpoint,
                "covers_receipts_through": args.covers_receipts_through,
                "saved_at": now,
                "saved_by_runtime": runtime.runtime_id,
                "saved_by_generation": runtime.generation,
            },
        )
        Agent.objects.filter(pk=agent.pk).update(last_progress_at=now)
    return checkpoint, acknowledged


def set_role(lobby_name: str, agent_id: str, role: str, *, account: str = "") -> Agent:
    """The owner's instructions for an agent; agents cannot change them."""
    if len(role) > MAX_ROLE_CHARS or "\x00" in role:
        raise bad_request(f"a role is text of at most {MAX_ROLE_CHARS} characters without NUL")
    with transaction.atomic():
        agent = agent_named(lobby_name, agent_id)
        Agent.objects.filter(pk=agent.pk).update(role=role)
        record_audit(
            ActorKind.OPERATOR,
            AuditAction.ROLE_SET,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail={"characters": len(role)},
        )
    agent.role = role
    return agent
