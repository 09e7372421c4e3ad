"""A lobby host's console routes: sign-in start, hand-off, sign-out, rooms, viewers, activity
and deletion (board.urls adds the settings page and the dashboard's settings)."""

from __future__ import annotations

from django.urls import path

from console import lobby_views as views

urlpatterns = [
    path("sign-in", views.sign_in),
    path("handoff", views.take_handoff),
    path("sign-out", views.sign_out),
    path("activity", views.activity_page),
    path("settings/activity", views.activity_moved),
    path("settings/rooms/create", views.create_room),
    path("settings/rooms/members", views.room_members),
    path("settings/rooms/archive", views.archive_room),
    path("settings/rooms/restore", views.restore_room),
    path("settings/viewers/add", views.add_viewer),
    path("settings/viewers/remove", views.remove_viewer),
    path("settings/delete", views.delete),
    path("settings/agents/rest", views.agent_rest),
    path("settings/agents/retry-notifications", views.agent_retry),
    path("settings/agents/cancel-scheduled", views.agent_cancel_scheduled),
    path("settings/agents/permissions", views.agent_permissions),
    path("settings/delivery", views.delivery),
    path("settings/watching", views.watching),
    path("settings/scheduled/cancel", views.cancel_scheduled),
]
