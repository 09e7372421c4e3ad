from __future__ import annotations

from django.apps import AppConfig


class LobbiesConfig(AppConfig):
    name = "lobbies"
    verbose_name = "Lobbies (the broker's store)"
