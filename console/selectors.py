"""What the console's pages read: home lists, a lobby's settings and its activity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import Count, Prefetch, Q

from console import mail
from console.models import Account, ApprovedRepository, DashboardViewer, LobbyOwner
from lobbies.models import (
    ActorKind,
    Agent,
    ArchivedRoom,
    AuditAction,
    AuditEvent,
    Lobby,
    Message,
    Room,
    RoomMember,
    Schedule,
    ScheduleStatus,
    Scope,
)
from lobbies.names import OWNER_SENDER

ACTIVITY_PAGE_SIZE = 50
# Rooms (and archived rooms) on one settings page: each brings a form with every agent.
ROOMS_PAGE_SIZE = 50


@dataclass(frozen=True)
class HomeLobby:
    name: str
    owned: bool


def account_lobbies(account: Account) -> list[HomeLobby]:
    """Lobbies the account owns, then private dashboards it may view, by name."""
    owned = list(
        LobbyOwner.objects.filter(account=account)
        .order_by("lobby__name")
        .values_list("lobby__name", flat=True)
    )
    viewing = (
        DashboardViewer.objects.filter(email=account.email)
        .exclude(lobby__name__in=owned)
        .order_by("lobby__name")
        .values_list("lobby__name", flat=True)
    )
    return [HomeLobby(n, True) for n in owned] + [HomeLobby(n, False) for n in viewing]


def owned_count(account: Account) -> int:
    return LobbyOwner.objects.filter(account=account).count()


def all_lobby_names() -> list[str]:
    return list(Lobby.objects.order_by("name").values_list("name", flat=True))


def services() -> list[tuple[str, str, bool]]:
    """(service, the variable that configures it, whether it is set): never the value."""
    return [
        ("Notes from GitHub", "POCOLOBBY_GITHUB_TOKEN", bool(settings.GITHUB_TOKEN)),
        ("Summaries by Claude", "ANTHROPIC_API_KEY", bool(settings.ANTHROPIC_API_KEY)),
        ("Sign-in mail by Postmark", "POSTMARK_TOKEN", not mail.mail_problem()),
    ]


def settings_of(
    lobby: Lobby, rooms_page: str | int | None = None, archived_page: str | int | None = None
) -> dict[str, Any]:
    """The console's part of the settings page (rooms and archived rooms a page at a time,
    agents, viewers, repositories, owner); board.selectors.settings_page adds the
    dashboard's. Never an agent token."""
    rooms_listing = Paginator(
        Room.objects.filter(lobby=lobby)
        .order_by("room_id")
        .prefetch_related(
            Prefetch("members", queryset=RoomMember.objects.select_related("agent")),
        ),
        ROOMS_PAGE_SIZE,
    ).get_page(rooms_page)
    archived_listing = Paginator(
        ArchivedRoom.objects.filter(lobby=lobby)
        .order_by("room_id")
        .values_list("room_id", flat=True),
        ROOMS_PAGE_SIZE,
    ).get_page(archived_page)
    agents = list(
        Agent.objects.filter(lobby=lobby).exclude(agent_id=OWNER_SENDER).order_by("agent_id")
    )
    return {
        "rooms": [
            {
                "room_id": room.room_id,
                "room_pk": room.pk,
                "members": {m.agent.agent_id for m in room.members.all()},
            }
            for room in rooms_listing.object_list
        ],
        "rooms_listing": rooms_listing,
        "archived_rooms": list(archived_listing.object_list),
        "archived_listing": archived_listing,
        "agents": [{"agent_id": a.agent_id, "agent_pk": a.pk} for a in agents],
        "viewers": list(
            DashboardViewer.objects.filter(lobby=lobby)
            .order_by("email")
            .values_list("email", flat=True)
        ),
        "repositories": list(
            ApprovedRepository.objects.filter(lobby=lobby)
            .order_by("repository")
            .values_list("repository", flat=True)
        ),
        "owner": LobbyOwner.objects.filter(lobby=lobby)
        .values_list("account__email", flat=True)
        .first(),
    }


SCHEDULED_LISTED = 50
PREVIEW_CHARACTERS = 120


def owner_controls_of(lobby: Lobby) -> dict[str, Any]:
    """The owner controls' facts: each agent's state and permissions, the lobby's delivery
    pause, and the scheduled messages not yet due (earliest first, at most 50)."""
    agents = Agent.objects.filter(lobby=lobby).exclude(agent_id=OWNER_SENDER).order_by("agent_id")
    pending = Message.objects.filter(lobby=lobby, scheduled_pending=True)
    # Counted by sender from the small sets (the scheduled-due partial index), not by joining
    # every message an agent ever sent.
    messages_by = dict(pending.values_list("sender_id").annotate(n=Count("pk")))
    schedules_by = dict(
        Schedule.objects.filter(lobby=lobby, status=ScheduleStatus.ACTIVE)
        .values_list("sender_id")
        .annotate(n=Count("pk"))
    )
    scheduled = list(
        pending.prefetch_related("deliveries__recipient").order_by("deliver_at", "pk")[
            :SCHEDULED_LISTED
        ]
    )
    return {
        "delivery_paused": lobby.delivery_paused,
        "agents_may_watch": lobby.agents_may_watch,
        "controls": [
            {
                "agent_id": a.agent_id,
                "enabled": a.enabled,
                "resting": a.resting,
                "broadcast": a.broadcast,
                "manage_rooms": a.manage_rooms,
                "attention": a.notification_attention_required,
                "scheduled_messages": messages_by.get(a.pk, 0),
                "active_schedules": schedules_by.get(a.pk, 0),
            }
            for a in agents
        ],
        "scheduled": [
            {
                "message_id": m.pk,
                "sender": m.sender_name,
                "to": _scheduled_to(m),
                "deliver_at": m.deliver_at,
                "preview": m.content[:PREVIEW_CHARACTERS],
                "cut": len(m.content) > PREVIEW_CHARACTERS,
            }
            for m in scheduled
        ],
        "scheduled_total": (
            pending.count() if len(scheduled) == SCHEDULED_LISTED else len(scheduled)
        ),
    }


def _scheduled_to(message: Message) -> str:
    if message.scope == Scope.BROADCAST:
        return "every agent"
    if message.room_name:
        return f"room {message.room_name}"
    return ", ".join(sorted(d.recipient.agent_id for d in message.deliveries.all()))


def _names(values: Any) -> str:
    return ", ".join(str(v) for v in values) if values else "nobody"


def _phrase(event: AuditEvent) -> str:
    """The action as words after the actor: 'archived room design'."""
    t, d, agent = event.target, event.detail or {}, event.agent_id
    match event.action:
        case "lobby_created":
            return f"created lobby {t}"
        case "lobby_deleted":
            return f"deleted lobby {t}"
        case "agent_added":
            return f"added agent {t}"
        case "agent_removed":
            return f"removed agent {t}"
        case "agent_disabled":
            return f"disabled agent {t}"
        case "agent_enabled":
            return f"enabled agent {t}"
        case "credential_rotated":
            return f"rotated agent {t}'s token"
        case "runtime_reset":
            return f"reset agent {t}'s runtime"
        case "runtime_claimed":
            return "started a new runtime"
        case "runtime_resumed":
            return "resumed its runtime"
        case "runtime_taken_over":
            if d.get("ended") == "released":
                return "started a new conversation after the last one ended"
            return "took over a runtime that never became ready"
        case "runtime_released":
            return "ended its conversation cleanly"
        case "runtime_handed_over":
            return f"handed agent {t} over to the conversation waiting for it"
        case "runtime_waiting":
            holder = str(d.get("holder") or "")
            held = f" from runtime {holder[:8]}" if holder else ""
            return (
                f"started a new conversation (runtime {t[:8]}) that waits to take over{held}; "
                "the owner can hand it over"
            )
        case "role_set":
            return f"set agent {t or agent}'s role"
        case "description_set":
            return f"set agent {t}'s description"
        case "room_created":
            members = d.get("members")
            return f"created room {t}" + (f" with {_names(members)}" if members else "")
        case "room_members_changed":
            parts = []
            if d.get("added"):
                parts.append(f"added {_names(d['added'])}")
            if d.get("removed"):
                parts.append(f"removed {_names(d['removed'])}")
            change = f" ({'; '.join(parts)})" if parts else ""
            return f"changed the members of room {t}{change}"
        case "room_deleted":
            return f"deleted room {t}"
        case "room_archived":
            return f"archived room {t}"
        case "room_restored":
            return f"restored room {t}"
        case "agents_rested":
            return f"{'rested' if d.get('rest') else 'resumed'} {t}"
        case "owner_set":
            return f"made {t} the owner"
        case "viewer_added":
            return f"added viewer {t}"
        case "viewer_removed":
            return f"removed viewer {t}"
        case "visibility_changed":
            return f"made the dashboard {t}"
        case "summary_settings_changed":
            return f"set the summary to {t} with {d.get('effort', '?')} effort"
        case "agent_appearance_changed":
            return f"changed how agent {t} appears"
        case "notes_source_changed":
            if not d.get("repository"):
                return f"removed the notes source of room {t}"
            return f"pointed room {t}'s notes at {d['repository']}"
        case "permissions_changed":
            granted = [name for name in ("manage_rooms", "broadcast") if d.get(name)]
            return f"set agent {t}'s permissions to {', '.join(granted) or 'none'}"
        case "delivery_paused":
            return "paused all delivery"
        case "delivery_resumed":
            return "resumed delivery"
        case "watching_allowed":
            return "let every agent watch the others"
        case "watching_withdrawn":
            return "let only agents with manage_rooms watch the others"
        case "notifications_retried":
            return f"retried notifications to {t} now"
        case "scheduled_cancelled":
            if "message_id" in d:
                return f"cancelled scheduled message {d['message_id']} of {t}"
            return (
                f"cancelled what {t} scheduled ({d.get('messages', 0)} messages, "
                f"{d.get('schedules', 0)} daily schedules)"
            )
        case "owner_message_sent":
            to = "every agent" if d.get("broadcast") else t
            return f"sent {to} a message as the owner"
        case "repository_approved":
            return f"approved repository {t}"
        case "repository_withdrawn":
            return f"withdrew repository {t}"
        case "restore_started":
            source = d.get("restored_from") or "a backup"
            return (
                f"restored the broker from {source} (taken {d.get('backup_taken_at') or '?'}): "
                f"agents need the new tokens ({d.get('new_tokens', 0)} issued)"
            )
        case "restore_finished":
            return "finished the restore: agents are admitted again"
        case "account_created" | "account_disabled" | "account_enabled":
            return f"{event.action.split('_')[1]} account {t}"
        case "account_operator_set":
            if d.get("operator"):
                return f"let account {t} open the Django admin by email code"
            return f"withdrew account {t}'s Django admin"
        case "enrollment_issued":
            return f"issued an enrolment code for agent {t}"
        case "enrollment_redeemed":
            return f"redeemed agent {t}'s enrolment code: its earlier tokens are revoked"
    return f"{event.action.replace('_', ' ')} {t}".strip()


def sentence(event: AuditEvent) -> str:
    if event.actor_kind == ActorKind.ACCOUNT:
        actor = event.account or "An account"
    elif event.actor_kind == ActorKind.AGENT:
        actor = f"Agent {event.agent_id}"
    else:
        actor = "The operator"
    return f"{actor} {_phrase(event)}"


@dataclass(frozen=True)
class ActivityLine:
    at: Any
    text: str


def activity(lobby: Lobby, number: str | int | None) -> tuple[Page[AuditEvent], list[ActivityLine]]:
    """The lobby's audit events and the broker's restores (every lobby lived through them),
    newest first, fifty a page."""
    restores = Q(
        lobby_name="", action__in=[AuditAction.RESTORE_STARTED, AuditAction.RESTORE_FINISHED]
    )
    events = AuditEvent.objects.filter(Q(lobby_name=lobby.name) | restores).order_by(
        "-created_at", "-pk"
    )
    page = Paginator(events, ACTIVITY_PAGE_SIZE).get_page(number)
    return page, [ActivityLine(e.created_at, sentence(e)) for e in page.object_list]
