"""The operator edits people and access in the Django admin (unlike the read-only store).

Saving goes through the same actions as the admin API, so disabling an account there also
ends its sessions and hand-offs, and every change is audited.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from console.actions import accounts
from console.actions.lobby_settings import Actor, add_viewer
from console.models import Account, ApprovedRepository, DashboardViewer, LobbyOwner


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ("email", "enabled", "may_create_lobbies", "created_at")
    list_filter = ("enabled", "may_create_lobbies")
    search_fields = ("email",)
    fields = ("email", "enabled", "may_create_lobbies")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("email",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Account, form: Any, change: bool) -> None:
        saved, _ = accounts.save_account(
            obj.email, enabled=obj.enabled, may_create_lobbies=obj.may_create_lobbies
        )
        obj.pk = saved.pk
        obj.created_at = saved.created_at


@admin.register(LobbyOwner)
class LobbyOwnerAdmin(admin.ModelAdmin):
    list_display = ("lobby", "account", "created_at")
    search_fields = ("lobby__name", "account__email")
    fields = ("lobby", "account")

    def save_model(self, request: HttpRequest, obj: LobbyOwner, form: Any, change: bool) -> None:
        accounts.set_owner(obj.lobby.name, obj.account.email)
        saved = LobbyOwner.objects.get(lobby=obj.lobby)
        obj.pk, obj.created_at = saved.pk, saved.created_at


@admin.register(DashboardViewer)
class DashboardViewerAdmin(admin.ModelAdmin):
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
class ApprovedRepositoryAdmin(admin.ModelAdmin):
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
