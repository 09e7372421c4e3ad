"""The operator's Django admin: browse everything, change nothing that was accepted."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from lobbies.models import Agent, AuditEvent, Delivery, Lobby, Message


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Lobby)
class LobbyAdmin(ReadOnlyAdmin):
    list_display = ("name", "created_at", "message_sequence")
    search_fields = ("name",)


@admin.register(Agent)
class AgentAdmin(ReadOnlyAdmin):
    # Tokens are never shown: credentials are not registered and hold only hashes anyway.
    list_display = ("agent_id", "lobby", "enabled", "manage_rooms", "broadcast", "status_line")
    list_filter = ("enabled", "lobby")
    search_fields = ("agent_id", "description")
    exclude = ("runtime_id",)


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

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "lobby",
        "sequence",
        "sender_name",
        "scope",
        "kind",
        "priority",
        "created_at",
    )
    list_filter = ("lobby", "scope", "kind", "priority")
    search_fields = ("sender_name", "correlation_id")
    exclude = ("request_hash",)
    inlines = [DeliveryInline]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ("message", "recipient", "state", "held_reason", "delivered_at", "agent_seen_at")
    list_filter = ("state", "held_reason")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor_kind", "action", "lobby_name", "agent_id", "target")
    list_filter = ("actor_kind", "action", "lobby_name")
