"""A lobby host's console routes: sign-in start, hand-off, sign-out and settings."""

from __future__ import annotations

urlpatterns: list = []
