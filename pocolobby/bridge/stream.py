"""The broker's stream as one bridge process sees it: connected or not, refused or not, and
who it speaks for. `link.py` drives it; the bridge (`core.py`) reads it before every tool call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from lobbies.wire.errors import ErrorCode
from lobbies.wire.frames import BridgeFrame, WelcomeFrame
from pocolobby.bridge.results import Stop, stopped_text

log = logging.getLogger("pocolobby.bridge")

SendFrame = Callable[[BridgeFrame], Awaitable[None]]
# starting: no answer yet (or a wait for a hand over ended); reconnecting: the socket dropped
# and the link retries; stopped: the broker refused this process for good.
Connection = Literal["starting", "connected", "reconnecting", "stopped"]


@dataclass
class Stream:
    """The stream's state; the socket itself is `link.Link`'s."""

    agent_id: str
    lobby_id: str
    state: Connection = "starting"
    stop: Stop | None = None
    welcomed: bool = False  # some connection of this process was accepted
    last_error: str | None = None
    # A generation is known, or the stream stopped.
    linked: asyncio.Event = field(default_factory=asyncio.Event)
    # The first connection attempt ended somehow (welcome, refusal or failure).
    link_attempted: asyncio.Event = field(default_factory=asyncio.Event)
    # The current socket's frame sender while one is open (set by the link).
    send_frame: SendFrame | None = None
    # Set by the link: drop the socket and reconnect with our generation, to learn why.
    recheck: Callable[[], None] | None = None

    def end_wait(self) -> bool:
        """Forget the refusal of a wait for a hand over (admitted, or refused for another
        reason now); True when this process was waiting."""
        if self.stop is None or self.stop.code != ErrorCode.RUNTIME_CONFLICT or self.welcomed:
            return False
        self.stop = None
        self.state = "starting"
        return True

    def welcome(self, frame: WelcomeFrame) -> None:
        self.welcomed = True
        self.agent_id = frame["agent_id"] or self.agent_id
        self.lobby_id = frame["lobby_id"] or self.lobby_id
        self.state = "connected"
        self.last_error = None
        self.linked.set()
        self.link_attempted.set()

    def disconnected(self, reason: str) -> None:
        if self.stop is None:
            self.state = "reconnecting"
            self.last_error = reason
        self.link_attempted.set()

    def stopped(self, stop: Stop) -> bool:
        """Record the broker's final refusal; False when one was recorded already."""
        if self.stop is not None:
            return False
        self.stop = stop
        self.state = "stopped"
        self.linked.set()
        self.link_attempted.set()
        return True

    def refusal(self, stop: Stop | None = None) -> str:
        """One sentence for the host's tool view: the refusal, then the fix."""
        stop = stop or self.stop
        if stop is None:
            return ""
        said = stopped_text(stop, self.agent_id, self.lobby_id)
        return f"PocoLobby refused this session ({stop.status} {stop.code}): {said}"

    def stopped_text(self) -> str:
        if self.stop is None:
            return ""
        return stopped_text(self.stop, self.agent_id, self.lobby_id)

    def stopped_sentence(self) -> str:
        """The refusal as the session's one event says it; every tool answer starts with it."""
        if self.stop is None:
            return ""
        stop = self.stop
        return f"PocoLobby bridge: not connected ({stop.status} {stop.code}). {self.stopped_text()}"


class Background:
    """Background tasks kept referenced until they end (asyncio keeps only weak ones)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[object]] = set()

    def spawn(self, coroutine: Awaitable[object]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
