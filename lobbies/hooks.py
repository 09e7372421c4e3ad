"""What the floors above the broker ask to hear about, inside the write's own transaction.

`lobbies` imports nothing above it (import-linter), yet a send to the lobby's human owner
must queue the owner's push in the same transaction that accepts it
(`board.notifications.alerts`). The board registers its function here when Django loads it
(board/apps.py); the send action calls every registered one, inside its transaction, so the
push is queued exactly when the message is accepted and never for a send that rolled back. A
hook that raises rolls the send back with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lobbies.models import Message

MessageHook = Callable[["Message"], object]

_TO_OWNER: list[MessageHook] = []


def on_message_to_owner(hook: MessageHook) -> None:
    """Call `hook(message)` inside the transaction of every accepted message to `owner`."""
    if hook not in _TO_OWNER:
        _TO_OWNER.append(hook)


def message_to_owner(message: Message) -> None:
    for hook in _TO_OWNER:
        hook(message)
