from __future__ import annotations

from django.apps import AppConfig


class BoardConfig(AppConfig):
    name = "board"
    verbose_name = "Board (the dashboard)"

    def ready(self) -> None:
        # A message to `owner` that expects a reply pushes to the owner's devices: queued
        # by the send's own transaction (lobbies/hooks.py says why it is a hook).
        from board.notifications.alerts import notify_owner_of_message
        from lobbies.hooks import on_message_to_owner

        on_message_to_owner(notify_owner_of_message)
