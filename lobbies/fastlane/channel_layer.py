"""channels' in-memory channel layer, made cheap with many sockets connected (the embedded default's
layer between a process's sockets and its dispatcher)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import channels.exceptions
import channels.layers


class InMemoryChannelLayer(channels.layers.InMemoryChannelLayer):  # type: ignore[misc]  # channels is untyped
    """channels' in-memory layer, its expiry sweep run at most once a second.

    The stock layer walks every channel's queue and every group's members on each `receive`
    and `group_send`: with 1,000 sockets connected, every wake, fence and socket receive paid
    for all of them (docs/PERFORMANCE.md, "Reconnect storm"). Messages expire after 60 s and
    group memberships after a day, so a sweep a second
    expires them as the stock layer does, to within a second.
    """

    SWEEP_SECONDS = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._swept_at = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept_at >= self.SWEEP_SECONDS:
            self._swept_at = now
            super()._clean_expired()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """The stock layer's, without a task per member gathered by `as_completed`: `send`
        never waits, so the members are sent to in turn. Every wake built a task set, a
        queue and futures, even for an agent with no socket here (docs/PERFORMANCE.md,
        "Figures from code comments")."""
        assert isinstance(message, dict), "Message is not a dict"  # as the stock layer
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            # As the stock layer: a full channel misses this message.
            with contextlib.suppress(channels.exceptions.ChannelFull):
                await self.send(channel, message)
