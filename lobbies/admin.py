"""The operator's Django admin: the store read-only, and the agent operations as actions.

Every action calls the same action function as the CLI and the admin API (lobbies/actions),
once per agent in its own transaction, audited with the admin user as the actor. Accepted
messages are never edited or deleted here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Exists, Model, OuterRef, Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse

from lobbies.actions import continuity, operator, rooms
from lobbies.errors import BrokerError
from lobbies.models import (
    Agent,
    Attachment,
    AuditEvent,
    Delivery,
    DeliveryState,
    Message,
    PendingUpload,
)
from lobbies.names import OWNER_SENDER

PREVIEW_CHARS = 120
RECIPIENTS_SHOWN = 8


# Set on the local operator's admin identity (console/access.py): its ticket came from
# `pocolobby settings`, which holds the admin token.
CREDENTIAL_ISSUER = "pocolobby_credential_issuer"
# The agent actions that mint a token (or a configuration or code that yields one).
MINTING_ACTIONS = ("rotate",)


def may_issue_credentials(request: HttpRequest) -> bool:
    """Whether this admin user may mint an agent token (docs/DECISIONS.md, "Credentials stay
    with the admin token"): the local operator, or a Django user (made with `createsuperuser`
    on the broker's machine; honoured hosted only in password recovery). An operator signed
    in by email code may not: control of a mailbox is not control of agents."""
    user = request.user
    return user.pk is not None or bool(getattr(user, CREDENTIAL_ISSUER, False))


def admin_actor(request: HttpRequest) -> str:
    """Who an admin change is audited as: the signed-in admin user (on a hosted broker the
    operator account's email), never a bare 'operator'; clipped to the audit column."""
    return f"admin:{request.user.get_username()}"[:254]


class AuditedAdmin(admin.ModelAdmin):
    """Our audit log records what the admin changes; Django's own history is kept as well,
    except for the local operator's identity, which has no user row to point at."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        """A NUL in a filter is refused (PostgreSQL cannot compare it); an action posted with
        ids that are not numbers acts on nothing (neither is a 500)."""
        if any("\x00" in value for _, values in request.GET.lists() for value in values):
            return HttpResponseBadRequest("a filter or search holds a NUL character")
        if request.method == "POST" and helpers.ACTION_CHECKBOX_NAME in request.POST:
            post = request.POST.copy()
            ids = [v for v in post.getlist(helpers.ACTION_CHECKBOX_NAME) if v.isdigit()]
            post.setlist(helpers.ACTION_CHECKBOX_NAME, ids)
            request.POST = post  # type: ignore[assignment]  # the stubs call POST immutable; Django's own views replace it so
        return super().changelist_view(request, extra_context)

    def log_addition(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.user.pk is not None:
            return super().log_addition(request, *args, **kwargs)
        return None

    def log_change(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.user.pk is not None:
            return super().log_change(request, *args, **kwargs)
        return None

    def log_deletions(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.user.pk is not None:
            return super().log_deletions(request, *args, **kwargs)
        return None


class ReadOnlyAdmin(AuditedAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


# ---------------------------------------------------------------- agents: the operator's actions


class NothingToChange(Exception):
    """The agent is already as asked; an admin-side note, never an API answer."""


def agent_label(agent: Agent) -> str:
    return f"{agent.agent_id} in {agent.lobby.name}"


def run_per_agent(
    request: HttpRequest,
    queryset: QuerySet[Agent],
    verb: str,
    call: Callable[[Agent], object],
) -> list[Agent]:
    """Call the action for each agent on its own (all or nothing per agent) and report which
    agents were changed, which refused and why, and how many selected ones are gone."""
    agents = list(queryset.select_related("lobby").order_by("lobby__name", "agent_id"))
    changed: list[Agent] = []
    refused: list[str] = []
    for agent in agents:
        try:
            call(agent)
        except BrokerError as exc:
            refused.append(f"{agent_label(agent)}: {exc.message}")
        except NothingToChange as exc:
            refused.append(f"{agent_label(agent)}: {exc}")
        else:
            changed.append(agent)
    if changed:
        names = ", ".join(agent_label(a) for a in changed)
        messages.success(request, f"{verb}: {names}")
    for line in refused:
        messages.warning(request, f"not {verb}, {line}")
    if request.POST.get("select_across") != "1":
        selected = set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
        gone = len(selected) - len(agents)
        if gone > 0:
            messages.warning(request, f"{gone} selected agent(s) no longer exist; nothing done")
    if not changed and not refused:
        messages.warning(request, f"no agent was {verb}")
    return changed


def confirm_page(
    request: HttpRequest,
    queryset: QuerySet[Agent],
    *,
    action: str,
    question: str,
    confirm: str,
    warning: str = "",
    form: forms.Form | None = None,
) -> TemplateResponse:
    """Django's confirmation step for a destructive action: the selected agents, a warning,
    and a button that posts the action again with `post=yes`."""
    context = {
        **admin.site.each_context(request),
        "title": question,
        "opts": Agent._meta,
        "agents": list(queryset.select_related("lobby").order_by("lobby__name", "agent_id")),
        "action": action,
        "question": question,
        "confirm": confirm,
        "warning": warning,
        "form": form,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/lobbies/agent/confirm_action.html", context)


def confirmed(request: HttpRequest) -> bool:
    return request.POST.get("post") == "yes"


def broker_url() -> str:
    """The URL an agent's configuration names: the API host hosted, the loopback port locally
    (what `pocolobby agent add` writes)."""
    if settings.POCOLOBBY_DOMAIN and settings.POCOLOBBY_API_HOSTS:
        return f"{settings.POCOLOBBY_PUBLIC_SCHEME}://{min(settings.POCOLOBBY_API_HOSTS)}"
    return f"http://127.0.0.1:{settings.POCOLOBBY_PORT}"


def configuration_download(agent: Agent, token: str) -> HttpResponse:
    """The new configuration, offered once as a file; it is not stored, shown or logged."""
    content = json.dumps(
        {"url": broker_url(), "token": token, "lobby": agent.lobby.name, "agent": agent.agent_id},
        indent=2,
    )
    response = HttpResponse(content + "\n", content_type="application/json")
    filename = f"pocolobby-{agent.lobby.name}-{agent.agent_id}.json"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


class RoleForm(forms.Form):
    role = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80}),
        help_text="Replaces the role instructions; the agent's next get_context shows them.",
    )


PERMISSION_CHOICES = [("keep", "keep as it is"), ("grant", "grant"), ("withdraw", "withdraw")]


class PermissionsForm(forms.Form):
    broadcast = forms.ChoiceField(choices=PERMISSION_CHOICES, initial="keep")
    manage_rooms = forms.ChoiceField(choices=PERMISSION_CHOICES, initial="keep")

    def wanted(self, field: str) -> bool | None:
        return {"keep": None, "grant": True, "withdraw": False}[self.cleaned_data[field]]


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdmin):
    # Tokens are never shown: credentials are not registered and hold only hashes anyway.
    list_display = (
        "agent_id",
        "lobby",
        "enabled",
        "resting",
        "manage_rooms",
        "broadcast",
        "notification_attention_required",
        "status_line",
    )
    list_filter = ("enabled", "resting", "notification_attention_required", "lobby")
    search_fields = ("agent_id", "description")
    exclude = ("runtime_id",)
    list_select_related = ("lobby",)
    actions = (
        "disable",
        "enable",
        "reset_runtime",
        "hand_over",
        "rotate",
        "rest",
        "resume",
        "retry_notifications",
        "set_permissions",
        "set_role",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        """The lobby's agents, without the reserved `owner` row that carries the owner's own
        messages (it is no agent: nothing here may disable or rotate it)."""
        return super().get_queryset(request).exclude(agent_id=OWNER_SENDER)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """A minting action is offered (and, since Django runs only offered actions, run) only
        to an admin user who holds the admin token."""
        actions = super().get_actions(request)
        if not may_issue_credentials(request):
            for name in MINTING_ACTIONS:
                actions.pop(name, None)
        return actions

    @admin.action(description="Disable selected agents (held until enabled)")
    def disable(self, request: HttpRequest, queryset: QuerySet[Agent]) -> TemplateResponse | None:
        if not confirmed(request):
            return confirm_page(
                request,
                queryset,
                action="disable",
                question="Disable these agents?",
                confirm="Yes, disable",
                warning="Their connections close, their runtimes are retired and every "
                "pending message to them is held until they are enabled again.",
            )
        actor = admin_actor(request)
        run_per_agent(
            request,
            queryset,
            "disabled",
            lambda a: operator.disable_agent(a.lobby.name, a.agent_id, account=actor),
        )
        return None

    @admin.action(description="Enable selected agents")
    def enable(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        actor = admin_actor(request)
        run_per_agent(
            request,
            queryset,
            "enabled",
            lambda a: operator.enable_agent(a.lobby.name, a.agent_id, account=actor),
        )

    @admin.action(description="Reset the runtime of selected agents")
    def reset_runtime(
        self, request: HttpRequest, queryset: QuerySet[Agent]
    ) -> TemplateResponse | None:
        if not confirmed(request):
            return confirm_page(
                request,
                queryset,
                action="reset_runtime",
                question="Reset the runtime of these agents?",
                confirm="Yes, reset",
                warning="The bound session is retired for good and disconnected; the next "
                "session to connect starts a fresh generation.",
            )
        actor = admin_actor(request)
        run_per_agent(
            request,
            queryset,
            "reset",
            lambda a: operator.reset_runtime(a.lobby.name, a.agent_id, account=actor),
        )
        return None

    @admin.action(description="Hand selected agents over to the new conversation waiting")
    def hand_over(self, request: HttpRequest, queryset: QuerySet[Agent]) -> TemplateResponse | None:
        """`pocolobby agent hand-over` and the dashboard's button: no token is minted (the
        waiting conversation already holds the agent's), so an operator signed in by email
        code may hand over, as the owner may from the dashboard."""
        if not confirmed(request):
            return confirm_page(
                request,
                queryset,
                action="hand_over",
                question="Hand these agents over to the conversation waiting for each?",
                confirm="Yes, hand over",
                warning="The session that holds each agent is retired for good and "
                "disconnected; the new conversation waiting for it takes it over and "
                "bootstraps. An agent nobody waits for is left as it is.",
            )
        actor = admin_actor(request)
        run_per_agent(
            request,
            queryset,
            "handed over",
            lambda a: operator.hand_over(a.lobby.name, a.agent_id, account=actor),
        )
        return None

    @admin.action(description="Rotate the token of one agent (download its new configuration)")
    def rotate(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        agents = list(queryset.select_related("lobby")[:2])
        if len(agents) != 1:
            messages.warning(request, "rotate one agent at a time: its configuration downloads")
            return None
        if not confirmed(request):
            return confirm_page(
                request,
                queryset,
                action="rotate",
                question="Rotate this agent's token?",
                confirm="Yes, rotate and download the configuration",
                warning="Every earlier token stops working and the session is disconnected. "
                "The new configuration downloads once and is never shown again: save it where "
                "the agent reads it, readable only by you (chmod 600). If the download is "
                "lost, rotate again.",
            )
        agent = agents[0]
        try:
            token = operator.rotate_credential(
                agent.lobby.name, agent.agent_id, account=admin_actor(request)
            )
        except BrokerError as exc:
            messages.warning(request, f"not rotated, {agent_label(agent)}: {exc.message}")
            return None
        return configuration_download(agent, token)

    @admin.action(description="Rest selected agents (nothing is pushed; messages queue)")
    def rest(self, request: HttpRequest, queryset: QuerySet[Agent]) -> TemplateResponse | None:
        if not confirmed(request):
            return confirm_page(
                request,
                queryset,
                action="rest",
                question="Rest these agents?",
                confirm="Yes, rest",
                warning="Nothing is pushed to a resting agent until it is resumed; its "
                "messages still queue and count.",
            )
        self._set_resting(request, queryset, resting=True)
        return None

    @admin.action(description="Resume selected agents")
    def resume(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        self._set_resting(request, queryset, resting=False)

    def _set_resting(self, request: HttpRequest, queryset: QuerySet[Agent], resting: bool) -> None:
        actor = admin_actor(request)

        def change(agent: Agent) -> None:
            if agent.resting == resting:
                state = "resting" if resting else "awake"
                raise NothingToChange(f"already {state}")
            changer = operator.operator_changer(agent.lobby.name, actor)
            rooms.rest_agents(changer, [agent.agent_id], resting, None)

        run_per_agent(request, queryset, "rested" if resting else "resumed", change)

    @admin.action(description="Retry notifications now (clears 'attention required')")
    def retry_notifications(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        actor = admin_actor(request)
        run_per_agent(
            request,
            queryset,
            "retried",
            lambda a: operator.retry_notifications(a.lobby.name, a.agent_id, account=actor),
        )

    @admin.action(description="Set permissions (broadcast, manage_rooms)")
    def set_permissions(
        self, request: HttpRequest, queryset: QuerySet[Agent]
    ) -> TemplateResponse | None:
        form = PermissionsForm(request.POST if confirmed(request) else None)
        if not form.is_valid():
            return confirm_page(
                request,
                queryset,
                action="set_permissions",
                question="Set the permissions of these agents",
                confirm="Set permissions",
                warning="broadcast sends to every agent in the lobby; manage_rooms creates "
                "rooms and changes their members.",
                form=form,
            )
        actor = admin_actor(request)
        broadcast, manage_rooms = form.wanted("broadcast"), form.wanted("manage_rooms")
        run_per_agent(
            request,
            queryset,
            "changed",
            lambda a: operator.set_permissions(
                a.lobby.name,
                a.agent_id,
                broadcast=broadcast,
                manage_rooms=manage_rooms,
                account=actor,
            ),
        )
        return None

    @admin.action(description="Set the role from text")
    def set_role(self, request: HttpRequest, queryset: QuerySet[Agent]) -> TemplateResponse | None:
        form = RoleForm(request.POST if confirmed(request) else None)
        if not form.is_valid():
            return confirm_page(
                request,
                queryset,
                action="set_role",
                question="Set the role of these agents",
                confirm="Set role",
                form=form,
            )
        actor = admin_actor(request)
        role = form.cleaned_data["role"]
        run_per_agent(
            request,
            queryset,
            "given the role",
            lambda a: continuity.set_role(a.lobby.name, a.agent_id, role, account=actor),
        )
        return None


# ---------------------------------------------------------------- messages and deliveries


class DeliveryInline(admin.TabularInline):
    model = Delivery
    extra = 0
    can_delete = False
    readonly_fields = (
        "recipient",
        "state",
        "held_reason",
        "delivered_at",
        "adapter_received_at",
        "notification_attempted_at",
        "agent_seen_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class DeliveryStateFilter(admin.SimpleListFilter):
    """Messages with at least one copy in the chosen state."""

    title = "delivery state"
    parameter_name = "delivery_state"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Message]
    ) -> Sequence[tuple[str, str]]:
        return DeliveryState.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        value = self.value()
        if value not in DeliveryState.values:
            return queryset
        copies = Delivery.objects.filter(message=OuterRef("pk"), state=value)
        return queryset.filter(Exists(copies))


def folded(text: str, limit: int = PREVIEW_CHARS) -> str:
    """One line of at most `limit` characters; the admin escapes it like any value."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    # What was said and to whom first: on a phone the rest scrolls sideways.
    list_display = (
        "id",
        "preview",
        "recipients",
        "sender_name",
        "lobby",
        "scope",
        "kind",
        "priority",
        "created_at",
        "sequence",
    )
    list_filter = ("lobby", "kind", "priority", "scope", DeliveryStateFilter)
    search_fields = ("content", "sender_name", "correlation_id")
    date_hierarchy = "created_at"
    list_select_related = ("lobby",)
    exclude = ("request_hash",)
    inlines = [DeliveryInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        copies = Delivery.objects.select_related("recipient").order_by("recipient__agent_id")
        return super().get_queryset(request).prefetch_related(Prefetch("deliveries", copies))

    @admin.display(description="content")
    def preview(self, message: Message) -> str:
        return folded(message.content)

    @admin.display(description="recipients")
    def recipients(self, message: Message) -> str:
        copies = list(message.deliveries.all())
        shown = [f"{d.recipient.agent_id}: {d.state}" for d in copies[:RECIPIENTS_SHOWN]]
        more = len(copies) - RECIPIENTS_SHOWN
        return ", ".join(shown) + (f", and {more} more" if more > 0 else "")


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ("message", "recipient", "state", "held_reason", "delivered_at", "agent_seen_at")
    list_filter = ("state", "held_reason", "recipient__lobby")
    search_fields = ("recipient__agent_id",)
    list_select_related = ("message", "recipient")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "actor_kind",
        "account",
        "action",
        "lobby_name",
        "agent_id",
        "target",
    )
    list_filter = ("actor_kind", "account", "action", "lobby_name")
    search_fields = ("target", "agent_id", "lobby_name", "account")
    date_hierarchy = "created_at"


@admin.register(Attachment)
class AttachmentAdmin(ReadOnlyAdmin):
    """Metadata only: the owner and the operator see names, types and sizes, never content."""

    list_display = ("id", "name", "media_type", "size", "uploader", "created_at", "expired_at")
    list_filter = ("media_type", "lobby")
    search_fields = ("name", "sha256", "uploader__agent_id")
    list_select_related = ("uploader",)


@admin.register(PendingUpload)
class PendingUploadAdmin(ReadOnlyAdmin):
    list_display = ("sha256", "size", "uploader", "created_at")
    list_filter = ("lobby",)
    list_select_related = ("uploader",)
