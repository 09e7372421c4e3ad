"""A lobby's settings pages: the page itself, the dashboard's settings, the viewers'
notifications, and the lobby's own (rooms, viewers, agents, delivery, deletion)."""

from __future__ import annotations

from django.urls import path

from board.settings import lobby_views, views

urlpatterns = [
    path("settings", views.settings_page),
    path("settings/visibility", views.visibility),
    path("settings/agents/appearance", views.appearance),
    path("settings/summary", views.summary),
    path("settings/notes-source", views.notes_source),
    path("settings/public-contents", views.public_contents),
    path("settings/viewer-notifications", views.viewer_notifications),
    path("settings/rooms/create", lobby_views.create_room),
    path("settings/rooms/members", lobby_views.room_members),
    path("settings/rooms/archive", lobby_views.archive_room),
    path("settings/rooms/restore", lobby_views.restore_room),
    path("settings/viewers/add", lobby_views.add_viewer),
    path("settings/viewers/remove", lobby_views.remove_viewer),
    path("settings/delete", lobby_views.delete),
    path("settings/agents/rest", lobby_views.agent_rest),
    path("settings/agents/retry-notifications", lobby_views.agent_retry),
    path("settings/agents/cancel-scheduled", lobby_views.agent_cancel_scheduled),
    path("settings/agents/permissions", lobby_views.agent_permissions),
    path("settings/delivery", lobby_views.delivery),
    path("settings/watching", lobby_views.watching),
    path("settings/scheduled/cancel", lobby_views.cancel_scheduled),
]
