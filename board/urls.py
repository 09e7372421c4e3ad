"""A lobby's pages: on its own host hosted, under /<lobby>/ locally (same paths)."""

from __future__ import annotations

from django.urls import include, path

from pocolobby.urls_api import bad_request, not_found

handler400 = bad_request
handler404 = not_found

urlpatterns = [
    path("", include("console.lobby_urls")),
]
