"""What a lobby's owner (or the local operator) changes in Settings.

Every action takes the actor, re-checks inside its transaction that the account still owns
the lobby, makes the change and writes one audit event, so a removed owner's request that
was already under way changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from board.models import AgentAppearance, BoardConfig, Effort, NotesSource, SummaryModel, Visibility
from console.actions.accounts import checked_email
from console.models import ApprovedRepository, DashboardViewer, LobbyOwner
from lobbies.actions import operator
from lobbies.actions import rooms as room_actions
from lobbies.actions.audit import record_audit
from lobbies.errors import bad_request, conflict, forbidden, not_found
from lobbies.models import ActorKind, Agent, AuditAction, Lobby, Room

MAX_PATHS = 20
REF = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")


@dataclass(frozen=True)
class Actor:
    """Who changes settings: an owner's account (by id and email) or the local operator."""

    kind: ActorKind
    account_id: int | None = None
    email: str = ""

    @classmethod
    def operator(cls) -> Actor:
        return cls(ActorKind.OPERATOR)


def _owned(actor: Actor, lobby_id: int) -> Lobby:
    """The lobby, locked for this transaction, if the actor may still change it."""
    lobby = Lobby.objects.select_for_update().filter(pk=lobby_id).first()
    if lobby is None:
        raise not_found("unknown_lobby", "this lobby no longer exists")
    if actor.kind == ActorKind.OPERATOR:
        return lobby
    owns = LobbyOwner.objects.filter(
        lobby=lobby, account_id=actor.account_id, account__enabled=True
    ).exists()
    if not owns:
        raise forbidden("not_owner", "only this lobby's owner can change its settings")
    return lobby


owned_lobby = _owned  # the same check for the owner's other actions (owner_replies.py)


def _audit(actor: Actor, action: AuditAction, lobby: Lobby, target: str, **detail: object) -> None:
    record_audit(
        actor.kind,
        action,
        lobby_name=lobby.name,
        account=actor.email,
        target=target,
        detail=detail or None,
    )


def _room_changer(actor: Actor, lobby: Lobby) -> room_actions.Changer:
    return room_actions.Changer(lobby.pk, lobby.name, actor.kind, account=actor.email)


def create_room(actor: Actor, lobby_id: int, room_id: str, members: list[str]) -> Room:
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        return room_actions.create_room(_room_changer(actor, lobby), room_id, members)


def set_room_members(actor: Actor, lobby_id: int, room_id: str, members: list[str]) -> None:
    """Replace the room's members; those leaving stop hearing it (their unseen copies held)."""
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        room_actions.set_room_members(_room_changer(actor, lobby), room_id, members)


def archive_room(actor: Actor, lobby_id: int, room_id: str) -> None:
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        room_actions.archive_room(lobby.pk, room_id, actor_kind=actor.kind, account=actor.email)


def restore_room(actor: Actor, lobby_id: int, room_id: str) -> None:
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        room_actions.restore_room(lobby.pk, room_id, actor_kind=actor.kind, account=actor.email)


def _config(lobby: Lobby) -> BoardConfig:
    config, _ = BoardConfig.objects.get_or_create(
        lobby=lobby, defaults={"updated_at": timezone.now()}
    )
    return config


def set_visibility(actor: Actor, lobby_id: int, visibility: str) -> None:
    if visibility not in Visibility.values:
        raise bad_request("visibility is private or public", code="invalid_field")
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        config = _config(lobby)
        if config.visibility != visibility:
            BoardConfig.objects.filter(pk=config.pk).update(
                visibility=visibility, updated_at=timezone.now()
            )
            _audit(actor, AuditAction.VISIBILITY_CHANGED, lobby, visibility)


def add_viewer(actor: Actor, lobby_id: int, email: str) -> None:
    email = checked_email(email)
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        _, created = DashboardViewer.objects.get_or_create(
            lobby=lobby, email=email, defaults={"created_at": timezone.now()}
        )
        if not created:
            raise conflict("viewer_exists", f"{email} is already a viewer")
        _audit(actor, AuditAction.VIEWER_ADDED, lobby, email)


def remove_viewer(actor: Actor, lobby_id: int, email: str) -> None:
    email = email.strip().lower()
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        deleted, _ = DashboardViewer.objects.filter(lobby=lobby, email=email).delete()
        if not deleted:
            raise not_found("unknown_viewer", f"{email} is not a viewer of this dashboard")
        _audit(actor, AuditAction.VIEWER_REMOVED, lobby, email)


def set_appearance(
    actor: Actor, lobby_id: int, agent_id: str, emoji: str, display_name: str, hidden: bool
) -> None:
    if len(emoji) > 16:
        raise bad_request("the emoji is at most 16 characters", code="invalid_field")
    if len(display_name) > 40:
        raise bad_request("the display name is at most 40 characters", code="invalid_field")
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        agent = Agent.objects.filter(lobby=lobby, agent_id=agent_id).first()
        if agent is None:
            raise not_found("unknown_agent", f"no agent {agent_id!r} in this lobby")
        AgentAppearance.objects.update_or_create(
            agent=agent, defaults={"emoji": emoji, "display_name": display_name, "hidden": hidden}
        )
        _audit(
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
        raise bad_request(f"model is one of {', '.join(SummaryModel.values)}", code="invalid_field")
    if effort not in Effort.values:
        raise bad_request(f"effort is one of {', '.join(Effort.values)}", code="invalid_field")
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        config = _config(lobby)
        BoardConfig.objects.filter(pk=config.pk).update(
            summary_model=model, summary_effort=effort, updated_at=timezone.now()
        )
        _audit(actor, AuditAction.SUMMARY_SETTINGS_CHANGED, lobby, model, effort=effort)


def _checked_paths(paths: list[str]) -> list[str]:
    cleaned = [p.strip() for p in paths if p.strip()]
    if not cleaned:
        raise bad_request("list at least one path to read", code="invalid_field")
    if len(cleaned) > MAX_PATHS:
        raise bad_request(f"at most {MAX_PATHS} paths", code="invalid_field")
    for path in cleaned:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or len(path) > 300 or "\\" in path:
            raise bad_request(f"{path!r} is not a path inside the repository", code="invalid_path")
    return list(dict.fromkeys(cleaned))


def set_notes_source(
    actor: Actor, lobby_id: int, room_id: str, repository: str, ref: str, paths: list[str]
) -> None:
    """Point a room's notes at an approved repository; an empty repository removes them."""
    repository = repository.strip()
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        room = room_actions._room(lobby.pk, room_id, lock=True)
        source = NotesSource.objects.select_for_update().filter(room=room).first()
        if not repository:
            if source is None:
                raise not_found("no_source", f"room {room_id!r} has no notes source")
            source.delete()
            _audit(actor, AuditAction.NOTES_SOURCE_CHANGED, lobby, room_id, repository=None)
            return
        if not ApprovedRepository.objects.filter(lobby=lobby, repository=repository).exists():
            raise forbidden(
                "repository_not_approved",
                f"{repository!r} is not approved for this lobby; ask the operator to approve it",
            )
        ref = ref.strip() or "main"
        if not REF.match(ref) or ".." in ref:
            raise bad_request(f"{ref!r} is not a branch, tag or commit", code="invalid_ref")
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
        _audit(
            actor,
            AuditAction.NOTES_SOURCE_CHANGED,
            lobby,
            room_id,
            repository=repository,
            ref=ref,
            paths=cleaned,
        )


def delete_lobby(actor: Actor, lobby_id: int, confirm: str) -> str:
    """Hard delete after the owner typed the lobby's name."""
    with transaction.atomic():
        lobby = _owned(actor, lobby_id)
        if confirm.strip() != lobby.name:
            raise bad_request(
                f"type the lobby's name, {lobby.name}, to confirm deleting it",
                code="confirm_mismatch",
            )
        operator.delete_lobby(lobby.name, actor_kind=actor.kind, account=actor.email)
    return lobby.name
