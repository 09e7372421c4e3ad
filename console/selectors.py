"""What the console's pages read: home lists, a lobby's settings and its activity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

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
    action = AuditAction(event.action)
    match action:
        case AuditAction.LOBBY_CREATED:
            return f"created lobby {t}"
        case AuditAction.LOBBY_DELETED:
            return f"deleted lobby {t}"
        case AuditAction.AGENT_ADDED:
            return f"added agent {t}"
        case AuditAction.AGENT_REMOVED:
            return f"removed agent {t}"
        case AuditAction.AGENT_DISABLED:
            return f"disabled agent {t}"
        case AuditAction.AGENT_ENABLED:
            return f"enabled agent {t}"
        case AuditAction.CREDENTIAL_ROTATED:
            return f"rotated agent {t}'s token"
        case AuditAction.RUNTIME_RESET:
            return f"reset agent {t}'s runtime"
        case AuditAction.RUNTIME_CLAIMED:
            return "started a new runtime"
        case AuditAction.RUNTIME_RESUMED:
            return "resumed its runtime"
        case AuditAction.RUNTIME_TAKEN_OVER:
            if d.get("ended") == "released":
                return "started a new conversation after the last one ended"
            return "took over a runtime that never became ready"
        case AuditAction.RUNTIME_RELEASED:
            return "ended its conversation cleanly"
        case AuditAction.RUNTIME_HANDED_OVER:
            return f"handed agent {t} over to the conversation waiting for it"
        case AuditAction.RUNTIME_WAITING:
            holder = str(d.get("holder") or "")
            held = f" from runtime {holder[:8]}" if holder else ""
            return (
                f"started a new conversation (runtime {t[:8]}) that waits to take over{held}; "
                "the owner can hand it over"
            )
        case AuditAction.ROLE_SET:
            return f"set agent {t or agent}'s role"
        case AuditAction.DESCRIPTION_SET:
            return f"set agent {t}'s description"
        case AuditAction.ROOM_CREATED:
            members = d.get("members")
            return f"created room {t}" + (f" with {_names(members)}" if members else "")
        case AuditAction.ROOM_MEMBERS_CHANGED:
            parts = []
            if d.get("added"):
                parts.append(f"added {_names(d['added'])}")
            if d.get("removed"):
                parts.append(f"removed {_names(d['removed'])}")
            change = f" ({'; '.join(parts)})" if parts else ""
            return f"changed the members of room {t}{change}"
        case AuditAction.ROOM_DELETED:
            return f"deleted room {t}"
        case AuditAction.ROOM_ARCHIVED:
            return f"archived room {t}"
        case AuditAction.ROOM_RESTORED:
            return f"restored room {t}"
        case AuditAction.AGENTS_RESTED:
            return f"{'rested' if d.get('rest') else 'resumed'} {t}"
        case AuditAction.OWNER_SET:
            return f"made {t} the owner"
        case AuditAction.VIEWER_ADDED:
            return f"added viewer {t}"
        case AuditAction.VIEWER_REMOVED:
            return f"removed viewer {t}"
        case AuditAction.VISIBILITY_CHANGED:
            return f"made the dashboard {t}"
        case AuditAction.SUMMARY_SETTINGS_CHANGED:
            return f"set the summary to {t} with {d.get('effort', '?')} effort"
        case AuditAction.AGENT_APPEARANCE_CHANGED:
            return f"changed how agent {t} appears"
        case AuditAction.NOTES_SOURCE_CHANGED:
            if not d.get("repository"):
                return f"removed the notes source of room {t}"
            return f"pointed room {t}'s notes at {d['repository']}"
        case AuditAction.PERMISSIONS_CHANGED:
            granted = [name for name in ("manage_rooms", "broadcast") if d.get(name)]
            return f"set agent {t}'s permissions to {', '.join(granted) or 'none'}"
        case AuditAction.DELIVERY_PAUSED:
            return "paused all delivery"
        case AuditAction.DELIVERY_RESUMED:
            return "resumed delivery"
        case AuditAction.WATCHING_ALLOWED:
            return "let every agent watch the others"
        case AuditAction.WATCHING_WITHDRAWN:
            return "let only agents with manage_rooms watch the others"
        case AuditAction.NOTIFICATIONS_RETRIED:
            return f"retried notifications to {t} now"
        case AuditAction.SCHEDULED_CANCELLED:
            if "message_id" in d:
                return f"cancelled scheduled message {d['message_id']} of {t}"
            return (
                f"cancelled what {t} scheduled ({d.get('messages', 0)} messages, "
                f"{d.get('schedules', 0)} daily schedules)"
            )
        case AuditAction.OWNER_MESSAGE_SENT:
            to = "every agent" if d.get("broadcast") else t
            return f"sent {to} a message as the owner"
        case AuditAction.REPOSITORY_APPROVED:
            return f"approved repository {t}"
        case AuditAction.REPOSITORY_WITHDRAWN:
            return f"withdrew repository {t}"
        case AuditAction.RESTORE_STARTED:
            source = d.get("restored_from") or "a backup"
            return (
                f"restored the broker from {source} (taken {d.get('backup_taken_at') or '?'}): "
                f"agents need the new tokens ({d.get('new_tokens', 0)} issued)"
            )
        case AuditAction.RESTORE_FINISHED:
            return "finished the restore: agents are admitted again"
        case (
            AuditAction.ACCOUNT_CREATED | AuditAction.ACCOUNT_DISABLED | AuditAction.ACCOUNT_ENABLED
        ):
            return f"{event.action.split('_')[1]} account {t}"
        case AuditAction.ACCOUNT_OPERATOR_SET:
            if d.get("operator"):
                return f"let account {t} open the Django admin by email code"
            return f"withdrew account {t}'s Django admin"
        case AuditAction.ENROLLMENT_ISSUED:
            return f"issued an enrolment code for agent {t}"
        case AuditAction.ENROLLMENT_REDEEMED:
            return f"redeemed agent {t}'s enrolment code: its earlier tokens are revoked"
    assert_never(action)  # mypy: every audit action has its own words


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
