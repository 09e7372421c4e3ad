"""Writes of the dashboard's activity facts: turns from the hooks, token counts per session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

from django.db import transaction
from django.utils import timezone

from board.models import BoardConfig, TokenSession, WorkStretch
from console.actions.lobby_settings import Actor, owned_lobby
from lobbies.actions.audit import record_audit
from lobbies.models import Agent, AuditAction


def record_turn(agent: Agent, event: Literal["start", "end"], at: datetime) -> WorkStretch | None:
    """A turn started (closing any stretch left open) or ended (closing the open one).

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


def set_public_message_contents(actor: Actor, lobby_id: int, shown: bool) -> None:
    """Whether a public dashboard's messages page shows the words (off until the owner says)."""
    with transaction.atomic():
        lobby = owned_lobby(actor, lobby_id)
        config, _ = BoardConfig.objects.get_or_create(
            lobby=lobby, defaults={"updated_at": timezone.now()}
        )
        if config.public_message_contents == shown:
            return
        BoardConfig.objects.filter(pk=config.pk).update(
            public_message_contents=shown, updated_at=timezone.now()
        )
        record_audit(
            actor.kind,
            AuditAction.VISIBILITY_CHANGED,
            lobby_name=lobby.name,
            account=actor.email,
            target="message contents " + ("public" if shown else "private"),
        )
