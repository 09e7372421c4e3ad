"""The operator edits people, access and lobbies in the Django admin.

Saving goes through the same actions as the admin API and the CLI, so disabling an account
there also ends its sessions and hand-offs, deleting a lobby retires its name, and every
change is audited.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from console.actions import accounts
from console.actions.lobby_settings import Actor, add_viewer
from console.models import Account, ApprovedRepository, DashboardViewer, LobbyOwner
from lobbies.access.hosts import hosted, lobby_origin
from lobbies.actions import operator
from lobbies.admin import AuditedAdmin, admin_actor
from lobbies.errors import BrokerError
from lobbies.models import Agent, Delivery, DeliveryState, Lobby, Message, Priority
from lobbies.push.presence import live_connections


def _count_per_lobby(rows: QuerySet[Any], lobby_path: str, counted: str = "pk") -> Coalesce:
    """One correlated COUNT per lobby row, so the list costs one query, not one per lobby."""
    counts = (
        rows.filter(**{lobby_path: OuterRef("pk")})
        .order_by()
        .values(lobby_path)
        .annotate(n=Count(counted, distinct=counted != "pk"))
        .values("n")
    )
    return Coalesce(Subquery(counts, output_field=IntegerField()), Value(0))


def _annotated(lobby: Lobby, count: str) -> int:
    """A count get_queryset annotated onto the row; the model declares no such field."""
    return int(getattr(lobby, count))


def _start_of_today() -> datetime:
    return timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)


class LobbyCreationForm(forms.ModelForm):
    class Meta:
        model = Lobby
        fields = ("name",)

    def clean_name(self) -> str:
        """The CLI's rules: name pattern, reserved names, retired names, taken names."""
        try:
            return operator.check_new_lobby_name(self.cleaned_data["name"])
        except BrokerError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from None

    def validate_unique(self) -> None:
        """check_new_lobby_name says it in the CLI's words."""


@admin.register(Lobby)
class LobbyAdmin(AuditedAdmin):
    list_display = (
        "name",
        "agents",
        "connected",
        "pending",
        "important_pending",
        "messages_today",
        "links",
        "created_at",
    )
    search_fields = ("name",)
    form = LobbyCreationForm
    fields = ("name",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Lobby]:
        pending = Delivery.objects.filter(state=DeliveryState.PENDING)
        return (
            super()
            .get_queryset(request)
            .annotate(
                agent_count=_count_per_lobby(Agent.objects.all(), "lobby"),
                connected_count=_count_per_lobby(live_connections(), "agent__lobby", "agent"),
                pending_count=_count_per_lobby(pending, "recipient__lobby"),
                important_count=_count_per_lobby(
                    pending.filter(message__priority=Priority.IMPORTANT), "recipient__lobby"
                ),
                today_count=_count_per_lobby(
                    Message.objects.filter(created_at__gte=_start_of_today()), "lobby"
                ),
            )
        )

    @admin.display(description="agents", ordering="agent_count")
    def agents(self, lobby: Lobby) -> int:
        return _annotated(lobby, "agent_count")

    @admin.display(description="connected", ordering="connected_count")
    def connected(self, lobby: Lobby) -> int:
        return _annotated(lobby, "connected_count")

    @admin.display(description="pending", ordering="pending_count")
    def pending(self, lobby: Lobby) -> int:
        return _annotated(lobby, "pending_count")

    @admin.display(description="important pending", ordering="important_count")
    def important_pending(self, lobby: Lobby) -> int:
        return _annotated(lobby, "important_count")

    @admin.display(description="messages today", ordering="today_count")
    def messages_today(self, lobby: Lobby) -> int:
        return _annotated(lobby, "today_count")

    @admin.display(description="pages")
    def links(self, lobby: Lobby) -> str:
        # Locally a path: the admin is open at 127.0.0.1 and at a public origin alike.
        origin = lobby_origin(lobby.name) if hosted() else f"/{lobby.name}"
        return format_html(
            '<a href="{}/">dashboard</a> · <a href="{}/settings">settings</a> · '
            '<a href="{}/activity">activity</a>',
            origin,
            origin,
            origin,
        )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a lobby has nothing to edit; its name is its identity

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """Counts, not every row (a lobby holds thousands), and the retired-name warning."""
        lines: list[str] = []
        for lobby in objs:
            lines.append(
                f"lobby {lobby.name}: {lobby.agents.count()} agents, "
                f"{lobby.messages.count()} messages, its rooms, schedules, settings and owner"
            )
            lines.append(f"the name {lobby.name!r} is retired for good: no new lobby can take it")
        return lines, {"lobbies": len(lines) // 2}, set(), []

    def save_model(self, request: HttpRequest, obj: Lobby, form: Any, change: bool) -> None:
        created = operator.create_lobby(obj.name, account=admin_actor(request))
        obj.pk, obj.created_at = created.pk, created.created_at

    def delete_model(self, request: HttpRequest, obj: Lobby) -> None:
        operator.delete_lobby(obj.name, account=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Lobby]) -> None:
        for name in queryset.values_list("name", flat=True):
            operator.delete_lobby(name, account=admin_actor(request))


@admin.register(Account)
class AccountAdmin(AuditedAdmin):
    list_display = ("email", "enabled", "may_create_lobbies", "operator", "created_at")
    list_filter = ("enabled", "may_create_lobbies", "operator")
    search_fields = ("email",)
    fields = ("email", "enabled", "may_create_lobbies", "operator")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("email",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Account, form: Any, change: bool) -> None:
        saved, _ = accounts.save_account(
            obj.email,
            enabled=obj.enabled,
            may_create_lobbies=obj.may_create_lobbies,
            operator=obj.operator,
        )
        obj.pk = saved.pk
        obj.created_at = saved.created_at


@admin.register(LobbyOwner)
class LobbyOwnerAdmin(AuditedAdmin):
    list_display = ("lobby", "account", "created_at")
    search_fields = ("lobby__name", "account__email")
    fields = ("lobby", "account")

    def save_model(self, request: HttpRequest, obj: LobbyOwner, form: Any, change: bool) -> None:
        accounts.set_owner(obj.lobby.name, obj.account.email)
        saved = LobbyOwner.objects.get(lobby=obj.lobby)
        obj.pk, obj.created_at = saved.pk, saved.created_at


@admin.register(DashboardViewer)
class DashboardViewerAdmin(AuditedAdmin):
    list_display = ("lobby", "email", "created_at")
    search_fields = ("lobby__name", "email")
    fields = ("lobby", "email")

    def save_model(
        self, request: HttpRequest, obj: DashboardViewer, form: Any, change: bool
    ) -> None:
        if change:
            DashboardViewer.objects.filter(pk=obj.pk).delete()
        add_viewer(Actor.operator(), obj.lobby.pk, obj.email)
        saved = DashboardViewer.objects.get(lobby=obj.lobby, email=obj.email.strip().lower())
        obj.pk, obj.email, obj.created_at = saved.pk, saved.email, saved.created_at


@admin.register(ApprovedRepository)
class ApprovedRepositoryAdmin(AuditedAdmin):
    list_display = ("lobby", "repository", "created_at")
    search_fields = ("lobby__name", "repository")
    fields = ("lobby", "repository")

    def save_model(
        self, request: HttpRequest, obj: ApprovedRepository, form: Any, change: bool
    ) -> None:
        if change:
            ApprovedRepository.objects.filter(pk=obj.pk).delete()
        accounts.approve_repository(obj.lobby.name, obj.repository)
        saved = ApprovedRepository.objects.get(lobby=obj.lobby, repository=obj.repository.strip())
        obj.pk, obj.created_at = saved.pk, saved.created_at
