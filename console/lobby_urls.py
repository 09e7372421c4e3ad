"""A lobby host's console routes: sign-in start, hand-off, sign-out and the activity page
(board.urls adds the dashboard, and board.settings.urls the settings pages)."""

from __future__ import annotations

from django.urls import path

from console import lobby_views as views

urlpatterns = [
    path("sign-in", views.sign_in),
    path("handoff", views.take_handoff),
    path("sign-out", views.sign_out),
    path("activity", views.activity_page),
    path("settings/activity", views.activity_moved),
]
