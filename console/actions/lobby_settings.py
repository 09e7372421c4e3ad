"""What a lobby's owner (or the local operator) changes in Settings.

Every action takes the actor, re-checks inside its transaction that the account still owns
the lobby, makes the change and writes one audit event, so a removed owner's request that
was already under way changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from console.actions.accounts import checked_email
from console.models import DashboardViewer, LobbyOwner
from lobbies.actions import operator
from lobbies.actions import rooms as room_actions
from lobbies.actions.audit import record_audit
from lobbies.errors import ErrorCode, bad_request, conflict, forbidden, not_found
from lobbies.models import ActorKind, AuditAction, Lobby, Room


@dataclass(frozen=True)
class Actor:
    """Who changes settings: an owner's account (by id and email) or the local operator."""

    kind: ActorKind
    account_id: int | None = None
    email: str = ""

    @classmethod
    def operator(cls) -> Actor:
        return cls(ActorKind.OPERATOR)


def owned(actor: Actor, lobby_id: int) -> Lobby:
    """The lobby, locked for this transaction, if the actor may still change it."""
    lobby = Lobby.objects.select_for_update().filter(pk=lobby_id).first()
    if lobby is None:
        raise not_found(ErrorCode.UNKNOWN_LOBBY, "this lobby no longer exists")
    if actor.kind == ActorKind.OPERATOR:
        return lobby
    owns = (
        actor.account_id is not None
        and LobbyOwner.objects.filter(
            lobby=lobby, account_id=actor.account_id, account__enabled=True
        ).exists()
    )
    if not owns:
        raise forbidden(ErrorCode.NOT_OWNER, "only this lobby's owner can change its settings")
    return lobby


def audit(actor: Actor, action: AuditAction, lobby: Lobby, target: str, **detail: object) -> None:
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
        lobby = owned(actor, lobby_id)
        return room_actions.create_room(_room_changer(actor, lobby), room_id, members)


def set_room_members(actor: Actor, lobby_id: int, room_id: str, members: list[str]) -> None:
    """Replace the room's members; those leaving stop hearing it (their unseen copies held)."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        room_actions.set_room_members(_room_changer(actor, lobby), room_id, members)


def archive_room(actor: Actor, lobby_id: int, room_id: str) -> None:
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        room_actions.archive_room(lobby.pk, room_id, actor_kind=actor.kind, account=actor.email)


def restore_room(actor: Actor, lobby_id: int, room_id: str) -> None:
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        room_actions.restore_room(lobby.pk, room_id, actor_kind=actor.kind, account=actor.email)


def add_viewer(actor: Actor, lobby_id: int, email: str) -> None:
    email = checked_email(email)
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        _, created = DashboardViewer.objects.get_or_create(
            lobby=lobby, email=email, defaults={"created_at": timezone.now()}
        )
        if not created:
            raise conflict(ErrorCode.VIEWER_EXISTS, f"{email} is already a viewer")
        audit(actor, AuditAction.VIEWER_ADDED, lobby, email)


def remove_viewer(actor: Actor, lobby_id: int, email: str) -> None:
    email = email.strip().lower()
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        deleted, _ = DashboardViewer.objects.filter(lobby=lobby, email=email).delete()
        if not deleted:
            raise not_found(ErrorCode.UNKNOWN_VIEWER, f"{email} is not a viewer of this dashboard")
        audit(actor, AuditAction.VIEWER_REMOVED, lobby, email)


def delete_lobby(actor: Actor, lobby_id: int, confirm: str) -> str:
    """Hard delete after the owner typed the lobby's name."""
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        if confirm.strip() != lobby.name:
            raise bad_request(
                f"type the lobby's name, {lobby.name}, to confirm deleting it",
                code=ErrorCode.CONFIRM_MISMATCH,
            )
        operator.delete_lobby(lobby.name, actor_kind=actor.kind, account=actor.email)
    return lobby.name
