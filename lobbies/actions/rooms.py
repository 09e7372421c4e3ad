"""Rooms and resting: a coordinator with `manage_rooms` shapes who hears what, inside its lobby."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from lobbies.actions.audit import record_audit
from lobbies.actions.messages import MAX_SCHEDULE_AHEAD
from lobbies.actions.runtime import RuntimeCaller, fence
from lobbies.errors import ErrorCode, bad_request, conflict, not_found
from lobbies.models import (
    ActorKind,
    Agent,
    ArchivedRoom,
    AuditAction,
    Delivery,
    HeldReason,
    Room,
    RoomMember,
    Schedule,
    ScheduleStatus,
    Scope,
    hold_copies,
)
from lobbies.names import OWNER_SENDER, check_name
from lobbies.push.events import wake_recipients_on_commit


def room_of(lobby_id: int, room_id: str, *, lock: bool = False) -> Room:
    rooms = Room.objects.filter(lobby_id=lobby_id, room_id=room_id)
    room = (rooms.select_for_update() if lock else rooms).first()
    if room is None:
        raise not_found(
            ErrorCode.UNKNOWN_ROOM, f"no room {room_id!r} in this lobby; see list_rooms"
        )
    return room


def _admitted(lobby_id: int, names: Iterable[str]) -> list[Agent]:
    """Only agents the owner already admitted to this lobby can be members."""
    wanted = list(dict.fromkeys(names))
    admitted = Agent.objects.filter(lobby_id=lobby_id, agent_id__in=wanted)
    found = {a.agent_id: a for a in admitted.exclude(agent_id=OWNER_SENDER)}
    unknown = [n for n in wanted if n not in found]
    if unknown:
        raise bad_request(
            f"no agent {', '.join(repr(n) for n in unknown)} in this lobby; members must be "
            "agents the owner admitted",
            code=ErrorCode.UNKNOWN_AGENT,
        )
    return [found[n] for n in wanted]


@dataclass(frozen=True)
class Changer:
    """Who changes a room from outside the API: the lobby's owner or the local operator in
    Settings. Agents with `manage_rooms` pass themselves."""

    lobby_id: int
    lobby_name: str
    kind: ActorKind
    account: str = ""


def _audit(
    actor: Agent | Changer, action: AuditAction, room_id: str, detail: dict[str, Any]
) -> None:
    if isinstance(actor, Changer):
        who = {"lobby_name": actor.lobby_name, "account": actor.account}
        kind = actor.kind
    else:
        who = {"lobby_name": actor.lobby.name, "agent_id": actor.agent_id}
        kind = ActorKind.AGENT
    record_audit(kind, action, target=room_id, detail=detail, **who)


def _add(room: Room, agents: list[Agent], now: datetime) -> list[str]:
    present = set(RoomMember.objects.filter(room=room).values_list("agent_id", flat=True))
    new = [a for a in agents if a.pk not in present]
    RoomMember.objects.bulk_create(RoomMember(room=room, agent=a, joined_at=now) for a in new)
    return [a.agent_id for a in new]


def _remove(room: Room, agents: list[Agent], *, hold: bool) -> list[str]:
    """Removed members stop hearing the room; with `hold`, their unseen copies are held and
    their history of the room loses its bodies. Joining later replays nothing."""
    pks = [a.pk for a in agents]
    removed = list(
        RoomMember.objects.filter(room=room, agent_id__in=pks).values_list(
            "agent__agent_id", flat=True
        )
    )
    if hold and pks:
        copies = Delivery.objects.filter(message__room=room, recipient_id__in=pks)
        hold_copies(copies, HeldReason.REMOVED)
        copies.update(redacted=True)
    RoomMember.objects.filter(room=room, agent_id__in=pks).delete()
    return removed


def _cancel_schedules_into(room: Room, now: datetime) -> int:
    """An occurrence resolves its room when it fires: a later room of the same name must not
    inherit a schedule, so schedules into a room end with it."""
    return Schedule.objects.filter(
        lobby_id=room.lobby_id, scope=Scope.ROOM, target=room.room_id, status=ScheduleStatus.ACTIVE
    ).update(status=ScheduleStatus.CANCELLED, cancelled_at=now, next_slot=None)


def _check_room_cap(lobby_id: int) -> None:
    """Refuse a room beyond the lobby's limit: one lobby's rooms stay a page an owner can read."""
    limit = settings.BOUNDS.lobby_rooms
    if Room.objects.filter(lobby_id=lobby_id).count() >= limit:
        raise conflict(
            ErrorCode.TOO_MANY_ROOMS,
            f"this lobby has {limit} rooms, its limit (POCOLOBBY_LOBBY_ROOMS); delete or "
            "archive one first; nothing was created",
        )


def _fence(actor: Agent | Changer, runtime: RuntimeCaller | None) -> None:
    if isinstance(actor, Agent):
        fence(actor, runtime)


def create_room(
    actor: Agent | Changer,
    room_id: str,
    members: list[str],
    runtime: RuntimeCaller | None = None,
) -> Room:
    check_name(room_id, "room id")
    now = timezone.now()
    try:
        with transaction.atomic():
            _fence(actor, runtime)
            if ArchivedRoom.objects.filter(lobby_id=actor.lobby_id, room_id=room_id).exists():
                raise conflict(
                    ErrorCode.ROOM_ARCHIVED,
                    f"room {room_id!r} is archived; its name stays reserved until the owner "
                    "restores it",
                )
            _check_room_cap(actor.lobby_id)
            room = Room.objects.create(lobby_id=actor.lobby_id, room_id=room_id, created_at=now)
            added = _add(room, _admitted(actor.lobby_id, members), now)
            _audit(actor, AuditAction.ROOM_CREATED, room_id, {"members": added})
    except IntegrityError:
        raise conflict(ErrorCode.ROOM_EXISTS, f"room {room_id!r} already exists") from None
    return room


def set_room_members(
    actor: Agent | Changer,
    room_id: str,
    members: list[str],
    runtime: RuntimeCaller | None = None,
) -> Room:
    """Replace the whole list (read list_rooms first: a stale list drops others' changes)."""
    with transaction.atomic():
        _fence(actor, runtime)
        room = room_of(actor.lobby_id, room_id, lock=True)
        wanted = _admitted(actor.lobby_id, members)
        keep = {a.pk for a in wanted}
        leaving = list(Agent.objects.filter(room_memberships__room=room).exclude(pk__in=keep))
        removed = _remove(room, leaving, hold=True)
        added = _add(room, wanted, timezone.now())
        _audit(
            actor, AuditAction.ROOM_MEMBERS_CHANGED, room_id, {"added": added, "removed": removed}
        )
    return room


def add_room_members(
    actor: Agent, room_id: str, members: list[str], runtime: RuntimeCaller | None = None
) -> Room:
    with transaction.atomic():
        _fence(actor, runtime)
        room = room_of(actor.lobby_id, room_id, lock=True)
        added = _add(room, _admitted(actor.lobby_id, members), timezone.now())
        _audit(actor, AuditAction.ROOM_MEMBERS_CHANGED, room_id, {"added": added})
    return room


def remove_room_members(
    actor: Agent, room_id: str, members: list[str], runtime: RuntimeCaller | None = None
) -> Room:
    with transaction.atomic():
        _fence(actor, runtime)
        room = room_of(actor.lobby_id, room_id, lock=True)
        removed = _remove(room, _admitted(actor.lobby_id, members), hold=True)
        _audit(actor, AuditAction.ROOM_MEMBERS_CHANGED, room_id, {"removed": removed})
    return room


def delete_room(actor: Agent, room_id: str, runtime: RuntimeCaller | None = None) -> dict[str, int]:
    """Remove every member and the room; messages and receipts stay as history."""
    with transaction.atomic():
        _fence(actor, runtime)
        room = room_of(actor.lobby_id, room_id, lock=True)
        now = timezone.now()
        held = hold_copies(Delivery.objects.filter(message__room=room), HeldReason.ROOM_DELETED)
        cancelled = _cancel_schedules_into(room, now)
        members = RoomMember.objects.filter(room=room).count()
        room.delete()
        detail = {"held": held, "schedules_cancelled": cancelled, "members": members}
        _audit(actor, AuditAction.ROOM_DELETED, room_id, detail)
    return detail


def archive_room(lobby_id: int, room_id: str, *, actor_kind: ActorKind, account: str = "") -> None:
    """The owner retires a room: accepted messages still arrive, the name stays reserved."""
    with transaction.atomic():
        room = room_of(lobby_id, room_id, lock=True)
        now = timezone.now()
        cancelled = _cancel_schedules_into(room, now)
        ArchivedRoom.objects.create(lobby_id=lobby_id, room_id=room_id, archived_at=now)
        room.delete()
        record_audit(
            actor_kind,
            AuditAction.ROOM_ARCHIVED,
            lobby_name=room.lobby.name,
            account=account,
            target=room_id,
            detail={"schedules_cancelled": cancelled},
        )


def restore_room(lobby_id: int, room_id: str, *, actor_kind: ActorKind, account: str = "") -> Room:
    """Restoring frees the name and starts an empty room: members, messages and schedules of
    the old one do not return (the dashboard's notes source, kept with the archive, does)."""
    with transaction.atomic():
        archived = ArchivedRoom.objects.filter(lobby_id=lobby_id, room_id=room_id).first()
        if archived is None:
            raise not_found(ErrorCode.UNKNOWN_ROOM, f"no archived room {room_id!r}")
        _check_room_cap(lobby_id)
        # The room first: what follows the archived room (its notes source) moves back to it.
        room = Room.objects.create(lobby_id=lobby_id, room_id=room_id, created_at=timezone.now())
        archived.delete()
        record_audit(
            actor_kind,
            AuditAction.ROOM_RESTORED,
            lobby_name=room.lobby.name,
            account=account,
            target=room_id,
        )
    return room


def _check_rest_at(at: datetime | None, now: datetime) -> None:
    """The bounds of deliver_at: a later rest change is at most 30 days ahead, never past."""
    if at is None:
        return
    if at <= now:
        raise bad_request(
            "at: is in the past; leave it out to do it now", code=ErrorCode.INVALID_TIME
        )
    if at > now + MAX_SCHEDULE_AHEAD:
        raise bad_request("at: is more than 30 days ahead", code=ErrorCode.INVALID_TIME)


def rest_agents(
    actor: Agent | Changer,
    agent_ids: list[str],
    rest: bool,
    at: datetime | None,
    runtime: RuntimeCaller | None = None,
) -> list[str]:
    """Rest agents (nothing is pushed to them; messages still queue) or resume them.

    A coordinator with `manage_rooms` or the operator (CLI, admin API, Django admin)."""
    _check_rest_at(at, timezone.now())
    with transaction.atomic():
        _fence(actor, runtime)
        agents = _admitted(actor.lobby_id, agent_ids)
        pks = [a.pk for a in agents]
        if at is None:
            Agent.objects.filter(pk__in=pks).update(
                resting=rest, rest_change_at=None, rest_change_to=None
            )
            if not rest:
                wake_recipients_on_commit([(pk, "info") for pk in pks])
        else:
            Agent.objects.filter(pk__in=pks).update(rest_change_at=at, rest_change_to=rest)
        _audit(
            actor,
            AuditAction.AGENTS_RESTED,
            ",".join(a.agent_id for a in agents)[:200],
            {"rest": rest, "at": at.isoformat() if at else None},
        )
    return [a.agent_id for a in agents]
