"""A lobby host's console routes: sign-in start, hand-off, sign-out and settings."""

from __future__ import annotations

from django.urls import path

from console import lobby_views as views

urlpatterns = [
    path("sign-in", views.sign_in),
    path("handoff", views.take_handoff),
    path("sign-out", views.sign_out),
    path("settings", views.settings_page),
    path("settings/activity", views.activity_page),
    path("settings/rooms/create", views.create_room),
    path("settings/rooms/members", views.room_members),
    path("settings/rooms/archive", views.archive_room),
    path("settings/rooms/restore", views.restore_room),
    path("settings/visibility", views.visibility),
    path("settings/viewers/add", views.add_viewer),
    path("settings/viewers/remove", views.remove_viewer),
    path("settings/agents/appearance", views.appearance),
    path("settings/summary", views.summary),
    path("settings/notes-source", views.notes_source),
    path("settings/delete", views.delete),
]
