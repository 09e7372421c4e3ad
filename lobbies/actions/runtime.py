"""Runtime ownership: one conversation consumes an agent's inbox; generations fence old processes.

A newly started bridge process claims without a generation and gets a new one; a network
reconnect presents its generation and is refused once superseded; another conversation gets
`runtime_conflict` while the holder may still be working. Socket loss never transfers
ownership of a binding whose conversation completed `ready`; one that never did and has no
live connection (a health check's throwaway conversation) yields to the next conversation,
and so does one whose conversation ended cleanly (its bridge sent `release`). A refused new
conversation is recorded as waiting, so the owner can hand the agent over to it.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.actions.restore import settle_uncertain
from lobbies.errors import BrokerError, ErrorCode, bad_request, conflict
from lobbies.fastlane import queries
from lobbies.models import (
    ActorKind,
    Agent,
    AuditAction,
    AuditEvent,
    Checkpoint,
    Connection,
    Lobby,
    Transport,
)
from lobbies.push.presence import WAITING_CONFIRMED, WAITING_FRESH, live_connections
from lobbies.wire.facts import iso
from lobbies.wire.frames import HELD_REASON_CHARS

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


class RuntimeConflict(BrokerError):
    """A new conversation refused because another holds the agent: it waits for a hand over.

    Raised inside the claim's transaction; the caller records the wait outside it
    (`wait_for_hand_over`), since the refusal rolls the claim's savepoint back.
    """

    def __init__(self, agent: Agent, runtime_id: str) -> None:
        super().__init__(409, ErrorCode.RUNTIME_CONFLICT, conflict_message(agent, waiting=True))
        self.agent_pk = agent.pk
        self.runtime_id = runtime_id


def conflict_message(agent: Agent, *, waiting: bool) -> str:
    """Who holds the agent, since when, whether it is live, and exactly how to hand over."""
    lobby, name = agent.lobby.name, agent.agent_id
    live = (
        live_connections().filter(agent_id=agent.pk, generation=agent.runtime_generation).exists()
    )
    state = (
        "and it is connected now"
        if live
        else "and it is not connected but never ended cleanly (a crash or a lost network "
        "keeps the agent, since that session may still be working)"
    )
    holder = (
        f"another conversation (runtime {(agent.runtime_id or '')[:8]}) holds {name} since "
        f"{iso(agent.runtime_bound_at) or 'its binding'}, {state}"
    )
    if not waiting:
        return (
            f"{holder}; the owner can hand it over with `pocolobby agent hand-over {lobby} "
            f"{name}` or free it with `pocolobby agent reset-runtime {lobby} {name}`"
        )
    return (
        f"{holder}. This new conversation is waiting to take over {name}: the owner taps "
        f"Hand over on the lobby's dashboard or runs `pocolobby agent hand-over {lobby} "
        f"{name}`, and this session is admitted within seconds, without a restart. Quitting "
        "the other conversation's Claude Code also lets this one in (a clean quit releases "
        f"the agent); `pocolobby agent reset-runtime {lobby} {name}` frees it for whichever "
        "conversation starts next."
    )


def check_runtime_id(runtime_id: str) -> str:
    if not RUNTIME_ID.match(runtime_id or ""):
        raise BrokerError(400, ErrorCode.INVALID_RUNTIME, "the runtime id must be a lowercase UUID")
    return runtime_id


def _locked_with_lobby(agent_pk: int) -> Agent:
    """The agent's row locked, with its lobby's name (lobbies/fastlane/queries.py
    `locked_agent`)."""
    agent = queries.locked_agent(agent_pk)
    if agent is None:
        raise Agent.DoesNotExist(f"agent {agent_pk} was removed")
    return agent


def claim_runtime(agent: Agent, runtime_id: str, generation: int | None) -> Claim:
    """Bind, resume or reconnect `runtime_id`; refuse anything that would take over silently."""
    check_runtime_id(runtime_id)
    with transaction.atomic():
        agent = _locked_with_lobby(agent.pk)
        if queries.runtime_retired(agent.pk, runtime_id):
            raise conflict(
                ErrorCode.RUNTIME_RETIRED,
                "the owner retired this conversation's binding; start a new conversation",
            )
        taken_from, ended = None, ""
        if agent.runtime_id is not None and agent.runtime_id != runtime_id:
            if generation is None and agent.runtime_released_at is not None:
                taken_from, ended = agent.runtime_id, "released"
            elif generation is None and _may_take_over(agent):
                taken_from, ended = agent.runtime_id, "never_ready"
            elif generation is None:
                raise RuntimeConflict(agent, runtime_id)
            else:
                raise conflict(ErrorCode.RUNTIME_CONFLICT, conflict_message(agent, waiting=False))
        if generation is not None:
            if agent.runtime_id != runtime_id or generation != agent.runtime_generation:
                raise conflict(
                    ErrorCode.GENERATION_SUPERSEDED,
                    f"generation {generation} was superseded by a newer process of this "
                    "conversation; this process must stop",
                )
            if agent.runtime_released_at is not None:  # it said it ended, yet it is back
                agent.runtime_released_at = None
                agent.save(update_fields=["runtime_released_at"])
            return Claim(agent, generation, started=False)
        # A binding the owner handed over has no bound time until its conversation claims it.
        resumed = agent.runtime_id == runtime_id and agent.runtime_bound_at is not None
        now = timezone.now()
        agent.runtime_id = runtime_id
        agent.runtime_generation += 1
        agent.runtime_bound_at = now
        if not resumed:
            agent.runtime_first_ready_at = None
        agent.runtime_released_at = None
        fields = ["runtime_released_at"]
        if agent.waiting_runtime_id == runtime_id:  # it waited and is admitted now
            agent.waiting_runtime_id, agent.waiting_since, agent.waiting_seen_at = None, None, None
            fields += ["waiting_runtime_id", "waiting_since", "waiting_seen_at"]
        if taken_from is not None:  # as the owner's reset would: requests were the old one's
            agent.owner_request_count, agent.owner_request_line = 0, ""
            agent.owner_requests_updated_at = None
            fields += ["owner_request_count", "owner_request_line", "owner_requests_updated_at"]
        agent.backlog_sequence = Lobby.objects.values_list("message_sequence", flat=True).get(
            pk=agent.lobby_id
        )
        agent.backlog_bound_at = now
        agent.loaded_checkpoint_revision = None
        agent.bootstrap_nonce = new_nonce()
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
                "runtime_first_ready_at",
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
                *fields,
            ]
        )
        if resumed:
            action = AuditAction.RUNTIME_RESUMED
        elif taken_from is not None:
            action = AuditAction.RUNTIME_TAKEN_OVER
        else:
            action = AuditAction.RUNTIME_CLAIMED
        detail = {"runtime_id": runtime_id, "generation": agent.runtime_generation}
        if taken_from is not None:
            detail["taken_from"] = taken_from
            if ended == "released":
                detail["ended"] = ended
        record_audit(
            ActorKind.AGENT,
            action,
            lobby_name=agent.lobby.name,
            agent_id=agent.agent_id,
            target=agent.agent_id,
            detail=detail,
        )
    return Claim(agent, agent.runtime_generation, started=True)


def wait_for_hand_over(refused: RuntimeConflict) -> None:
    """Record the refused conversation as waiting to take over the agent (or that it still
    is): the owner sees it and may hand the agent over to it. The latest conversation to ask
    is the one waiting; nothing is recorded for one that holds the agent meanwhile.

    Once the wait is real (the conversation asked again, WAITING_CONFIRMED after its first
    ask: a health check's throwaway conversation asks once), it is audited, once per wait,
    in the same transaction: the Activity page says a conversation waited."""
    now = timezone.now()
    with transaction.atomic():
        waited = Agent.objects.filter(pk=refused.agent_pk).exclude(runtime_id=refused.runtime_id)
        changed = waited.update(
            waiting_since=Case(
                When(
                    waiting_runtime_id=refused.runtime_id,
                    waiting_seen_at__gte=now - WAITING_FRESH,
                    then=F("waiting_since"),
                ),
                default=Value(now),
            ),
            waiting_runtime_id=refused.runtime_id,
            waiting_seen_at=now,
        )
        if changed:
            _audit_confirmed_wait(refused, now)


def _audit_confirmed_wait(refused: RuntimeConflict, now: datetime) -> None:
    agent = (
        Agent.objects.filter(pk=refused.agent_pk)
        .values("agent_id", "lobby__name", "runtime_id", "waiting_since")
        .first()
    )
    if agent is None or agent["waiting_since"] is None:
        return
    since = agent["waiting_since"]
    if now - since < WAITING_CONFIRMED:
        return
    lobby_name, agent_id = agent["lobby__name"], agent["agent_id"]
    recorded = AuditEvent.objects.filter(
        lobby_name=lobby_name,
        agent_id=agent_id,
        action=AuditAction.RUNTIME_WAITING,
        target=refused.runtime_id,
        created_at__gte=since,
    ).exists()
    if recorded:
        return
    record_audit(
        ActorKind.AGENT,
        AuditAction.RUNTIME_WAITING,
        lobby_name=lobby_name,
        agent_id=agent_id,
        target=refused.runtime_id,
        detail={"since": iso(since), "holder": agent["runtime_id"] or ""},
    )


def release_runtime(agent_pk: int, generation: int) -> bool:
    """The holder's conversation ended cleanly: its bridge, told by its host to end (stdin
    closed, or SIGINT/SIGTERM), sent `release` on its open stream. The next new conversation
    is then admitted without the owner. Only the current generation releases: an older
    process of the conversation, or a binding taken over meanwhile, is left as it is."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(pk=agent_pk).first()
        if (
            agent is None
            or agent.runtime_id is None
            or agent.runtime_generation != generation
            or agent.runtime_released_at is not None
        ):
            return False
        agent.runtime_released_at = timezone.now()
        agent.save(update_fields=["runtime_released_at"])
        record_audit(
            ActorKind.AGENT,
            AuditAction.RUNTIME_RELEASED,
            lobby_name=Lobby.objects.values_list("name", flat=True).get(pk=agent.lobby_id),
            agent_id=agent.agent_id,
            target=agent.agent_id,
            detail={"runtime_id": agent.runtime_id, "generation": generation},
        )
    return True


def _may_take_over(agent: Agent) -> bool:
    """A binding yields to another conversation only if its conversation never completed
    ready and nothing of it is connected: a health check (`claude mcp list`) starts the
    bridge under a throwaway conversation that handshakes and exits. A binding that was
    ready keeps it whatever its idleness, unless its conversation ended cleanly (released)
    or the owner hands it over."""
    if agent.runtime_first_ready_at is not None:
        return False
    return not live_connections().filter(agent_id=agent.pk).exists()


def check_fence(agent: Agent, caller: RuntimeCaller | None) -> None:
    """Refuse a runtime-originated write from anything but the current generation.

    Call with a row read inside the write's transaction (select_for_update), so an owner
    reset or a newer process cannot slip in between the check and the write.
    """
    if caller is None:
        return
    if agent.runtime_id != caller.runtime_id or agent.runtime_generation != caller.generation:
        raise conflict(
            ErrorCode.GENERATION_SUPERSEDED,
            "this bridge process no longer holds the agent's runtime; its writes are refused",
        )


def new_nonce() -> str:
    """A bootstrap's nonce: 96 random bits as hex. A shell agent passes it as an argument
    (`pocolobby msg ready <nonce>`), and a URL-safe one starting with "-" read as an option."""
    return secrets.token_hex(12)


def fence(agent: Agent, caller: RuntimeCaller | None) -> None:
    """Inside a write's transaction: lock the agent's row, then refuse a superseded runtime.

    Hand-written (lobbies/fastlane/queries.py): every send of a bridge runs it.
    """
    if caller is not None:
        check_fence(_locked_with_lobby(agent.pk), caller)


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
                ErrorCode.STALE_NONCE,
                "this nonce is not the current bootstrap's; read the latest bootstrap notice",
            )
        current = (
            Checkpoint.objects.filter(agent=agent).values_list("revision", flat=True).first() or 0
        )
        if checkpoint_revision is not None and current != checkpoint_revision:
            raise conflict(
                ErrorCode.STALE_CHECKPOINT,
                f"your checkpoint is at revision {current}, not {checkpoint_revision}: "
                "call get_context again, then ready with the revision it shows",
                revision=current,
            )
        now = timezone.now()
        settle_uncertain(agent.pk)
        agent.ready_at = now
        agent.runtime_first_ready_at = agent.runtime_first_ready_at or now
        # What it says it loaded; without a revision, what it could have loaded.
        agent.loaded_checkpoint_revision = current
        agent.last_progress_at = now
        agent.notification_attention_required = False
        agent.notify_attempts = 0
        agent.save(
            update_fields=[
                "ready_at",
                "runtime_first_ready_at",
                "loaded_checkpoint_revision",
                "last_progress_at",
                "notification_attention_required",
                "notify_attempts",
            ]
        )
    return agent


@dataclass(frozen=True)
class DeliveryReport:
    """A bridge's `delivery` frame, checked: how it delivers and whether it holds notices."""

    transport: str
    held: bool
    held_reason: str
    attention: bool

    @classmethod
    def parse(cls, frame: dict[str, Any]) -> DeliveryReport:
        """The frame's facts, or a BrokerError naming the field that is wrong."""
        transport = frame.get("transport")
        if transport not in Transport.values:
            raise bad_request(
                f"transport: one of {', '.join(Transport.values)}", code=ErrorCode.INVALID_FRAME
            )
        held, attention = frame.get("held", False), frame.get("attention", False)
        if not isinstance(held, bool) or not isinstance(attention, bool):
            raise bad_request("held and attention: true or false", code=ErrorCode.INVALID_FRAME)
        reason = frame.get("held_reason") or ""
        if not isinstance(reason, str) or len(reason) > HELD_REASON_CHARS:
            raise bad_request(
                f"held_reason: text of at most {HELD_REASON_CHARS} characters",
                code=ErrorCode.INVALID_FRAME,
            )
        # One printable line, whatever the bridge's error said: it is shown in terminals too.
        reason = " ".join("".join(c if c.isprintable() else " " for c in reason).split())
        return cls(str(transport), held, reason if held else "", attention)


def report_delivery(connection_pk: int, generation: int, report: DeliveryReport) -> None:
    """Record a connection's delivery facts; `attention` (a tmux bridge gave up a notice its
    pane never took) sets notification_attention_required as spent retries do. Messages stay
    pending either way: only an acknowledgment resolves them."""
    with transaction.atomic():
        row = Connection.objects.select_for_update().filter(pk=connection_pk).first()
        if row is None:
            return  # the socket closed meanwhile
        row.transport = report.transport
        row.held_since = (row.held_since or timezone.now()) if report.held else None
        row.held_reason = report.held_reason
        row.save(update_fields=["transport", "held_since", "held_reason"])
        if report.attention:
            agent = Agent.objects.select_for_update().get(pk=row.agent_id)
            if agent.runtime_generation == generation:
                agent.notification_attention_required = True
                agent.save(update_fields=["notification_attention_required"])
