"""Writes to the board's tables: the dashboard's activity facts (turns from the hooks, token
counts per session) and the owner's dashboard settings (visibility, appearance, summaries,
notes sources), each checked against the owner's rights by console.actions.lobby_settings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

from django.db import transaction
from django.utils import timezone

from board.models import (
    AgentAppearance,
    BoardConfig,
    Effort,
    NotesSource,
    SummaryModel,
    TokenSession,
    Visibility,
    WorkStretch,
)
from console.actions.accounts import approve_repository
from console.actions.lobby_settings import Actor, audit, owned
from console.models import ApprovedRepository
from lobbies.actions import activity as activity_actions
from lobbies.actions import rooms as room_actions
from lobbies.actions.operator import HandOver, hand_over
from lobbies.errors import ErrorCode, bad_request, forbidden, not_found
from lobbies.models import ActorKind, Agent, AuditAction, Lobby

MAX_PATHS = 20
REF = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")


def record_turn(
    agent: Agent, event: Literal["start", "end"], at: datetime, host: str | None = None
) -> WorkStretch | None:
    """A turn started (closing any stretch left open) or ended (closing the open one), from
    Claude Code's hooks or a bridge watching its pane; the agent's current turn (and `host`,
    when given) is stored beside the stretch in the same transaction.

    An end with no stretch open is accepted and stores nothing: hooks can miss a start.
    Times never run backwards inside a stretch, whatever order the hooks arrive in.
    """
    with transaction.atomic():
        open_stretches = list(
            WorkStretch.objects.select_for_update()
            .filter(agent=agent, ended_at__isnull=True)
            .order_by("started_at")
        )
        for stretch in open_stretches:
            stretch.ended_at = max(at, stretch.started_at)
            stretch.save(update_fields=["ended_at"])
        activity_actions.record_turn(agent, event, at, host)
        if event == "start":
            return WorkStretch.objects.create(agent=agent, started_at=at)
        return open_stretches[-1] if open_stretches else None


@dataclass(frozen=True)
class SessionDay:
    """One session's totals for one UTC day, as read from its transcripts."""

    session_id: str
    day: date
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int


def store_token_days(agent: Agent, days: list[SessionDay], now: datetime) -> int:
    """Replace the agent's totals for each (session, day) sent; re-sending counts nothing twice."""
    with transaction.atomic():
        for entry in days:
            TokenSession.objects.update_or_create(
                agent=agent,
                session_id=entry.session_id,
                day=entry.day,
                defaults={
                    "input_tokens": entry.input_tokens,
                    "output_tokens": entry.output_tokens,
                    "cache_read_tokens": entry.cache_read_tokens,
                    "cache_creation_tokens": entry.cache_creation_tokens,
                    "updated_at": now,
                },
            )
    return len(days)


# ---------------------------------------------------------------- the owner's dashboard settings


def _config(lobby: Lobby) -> BoardConfig:
    config, _ = BoardConfig.objects.get_or_create(
        lobby=lobby, defaults={"updated_at": timezone.now()}
    )
    return config


def set_visibility(actor: Actor, lobby_id: int, visibility: str) -> None:
    if visibility not in Visibility.values:
        raise bad_request("visibility is private or public", code=ErrorCode.INVALID_FIELD)
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        config = _config(lobby)
        if config.visibility != visibility:
            BoardConfig.objects.filter(pk=config.pk).update(
                visibility=visibility, updated_at=timezone.now()
            )
            audit(actor, AuditAction.VISIBILITY_CHANGED, lobby, visibility)


def set_appearance(
    actor: Actor, lobby_id: int, agent_id: str, emoji: str, display_name: str, hidden: bool
) -> None:
    if len(emoji) > 16:
        raise bad_request("the emoji is at most 16 characters", code=ErrorCode.INVALID_FIELD)
    if len(display_name) > 40:
        raise bad_request("the display name is at most 40 characters", code=ErrorCode.INVALID_FIELD)
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        agent = Agent.objects.filter(lobby=lobby, agent_id=agent_id).first()
        if agent is None:
            raise not_found(ErrorCode.UNKNOWN_AGENT, f"no agent {agent_id!r} in this lobby")
        AgentAppearance.objects.update_or_create(
            agent=agent, defaults={"emoji": emoji, "display_name": display_name, "hidden": hidden}
        )
        audit(
            actor,
            AuditAction.AGENT_APPEARANCE_CHANGED,
            lobby,
            agent_id,
            emoji=emoji,
            display_name=display_name,
            hidden=hidden,
        )


def set_summary(actor: Actor, lobby_id: int, model: str, effort: str) -> None:
    if model not in SummaryModel.values:
        raise bad_request(
            f"model is one of {', '.join(SummaryModel.values)}", code=ErrorCode.INVALID_FIELD
        )
    if effort not in Effort.values:
        raise bad_request(
            f"effort is one of {', '.join(Effort.values)}", code=ErrorCode.INVALID_FIELD
        )
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        config = _config(lobby)
        BoardConfig.objects.filter(pk=config.pk).update(
            summary_model=model, summary_effort=effort, updated_at=timezone.now()
        )
        audit(actor, AuditAction.SUMMARY_SETTINGS_CHANGED, lobby, model, effort=effort)


def _checked_paths(paths: list[str]) -> list[str]:
    cleaned = [p.strip() for p in paths if p.strip()]
    if not cleaned:
        raise bad_request("list at least one path to read", code=ErrorCode.INVALID_FIELD)
    if len(cleaned) > MAX_PATHS:
        raise bad_request(f"at most {MAX_PATHS} paths", code=ErrorCode.INVALID_FIELD)
    for path in cleaned:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or len(path) > 300 or "\\" in path:
            raise bad_request(
                f"{path!r} is not a path inside the repository", code=ErrorCode.INVALID_PATH
            )
    return list(dict.fromkeys(cleaned))


def set_notes_source(
    actor: Actor, lobby_id: int, room_id: str, repository: str, ref: str, paths: list[str]
) -> None:
    """Point a room's notes at an approved repository; an empty repository removes them."""
    repository = repository.strip()
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        room = room_actions.room_of(lobby.pk, room_id, lock=True)
        source = NotesSource.objects.select_for_update().filter(room=room).first()
        if not repository:
            if source is None:
                raise not_found(ErrorCode.NO_SOURCE, f"room {room_id!r} has no notes source")
            source.delete()
            audit(actor, AuditAction.NOTES_SOURCE_CHANGED, lobby, room_id, repository=None)
            return
        if actor.kind == ActorKind.OPERATOR:
            # The operator approves repositories, so its own source setting approves this one.
            approve_repository(lobby.name, repository)
        elif not ApprovedRepository.objects.filter(lobby=lobby, repository=repository).exists():
            raise forbidden(
                ErrorCode.REPOSITORY_NOT_APPROVED,
                f"{repository!r} is not approved for this lobby; ask the operator to approve it",
            )
        ref = ref.strip() or "main"
        if not REF.match(ref) or ".." in ref:
            raise bad_request(f"{ref!r} is not a branch, tag or commit", code=ErrorCode.INVALID_REF)
        cleaned = _checked_paths(paths)
        if source is None:
            NotesSource.objects.create(room=room, repository=repository, ref=ref, paths=cleaned)
        elif (source.repository, source.ref, source.paths) != (repository, ref, cleaned):
            NotesSource.objects.filter(pk=source.pk).update(
                repository=repository,
                ref=ref,
                paths=cleaned,
                settings_version=source.settings_version + 1,
                last_error="",
                # Due at once, in any process: the new settings are checked on the next open.
                last_checked_at=None,
            )
        else:
            return
        audit(
            actor,
            AuditAction.NOTES_SOURCE_CHANGED,
            lobby,
            room_id,
            repository=repository,
            ref=ref,
            paths=cleaned,
        )


def set_public_message_contents(actor: Actor, lobby_id: int, shown: bool) -> None:
    """Whether a public dashboard's messages page shows the words (off until the owner says)."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        config = _config(lobby)
        if config.public_message_contents == shown:
            return
        BoardConfig.objects.filter(pk=config.pk).update(
            public_message_contents=shown, updated_at=timezone.now()
        )
        audit(
            actor,
            AuditAction.VISIBILITY_CHANGED,
            lobby,
            "message contents " + ("public" if shown else "private"),
        )


def hand_over_as(actor: Actor, lobby_id: int, agent_id: str, conversation: str) -> HandOver:
    """The dashboard's Hand over: the operator's action, by an actor who must still own the
    lobby (checked in the same transaction), for the waiting conversation the page showed."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        return hand_over(
            lobby.name, agent_id, actor_kind=actor.kind, account=actor.email, shown=conversation
        )
