"""Channel-layer messages between processes: wake a bridge's socket, fence it, wake the dispatcher.

Only ever published after commit (`on_commit`), so a woken reader always finds the rows.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from typing import Literal, Protocol, TypeAlias, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from lobbies.wire.errors import ErrorCode
from lobbies.wire.jsontext import JSONObject

log = logging.getLogger("pocolobby.events")

DISPATCH_GROUP = "pocolobby.dispatch"


# The channel-layer messages a bridge's socket handles (lobbies.push.consumers.BridgeConsumer has
# one method per `type`, dots as underscores), and the dispatcher's wake (pocolobby.loops).
class WakeMessage(TypedDict):
    """New messages wait: `important` skips the batching delay."""

    type: Literal["agent.wake"]
    priority: str


class HintMessage(TypedDict):
    """Remind the runtime of `generation` of messages it did not confirm writing."""

    type: Literal["agent.hint"]
    generation: int
    message_ids: list[int]


class BootstrapMessage(TypedDict):
    type: Literal["agent.bootstrap"]
    generation: int


class ReceiptsMessage(TypedDict):
    """Read receipts owed to the sender: each `message_id`, `seen_by`, `seen_at`."""

    type: Literal["agent.receipts"]
    receipts: list[JSONObject]


class ActivityMessage(TypedDict):
    """Watched agents' new activity owed to a watcher: each `agent_id`, `activity`, `since`."""

    type: Literal["agent.activity"]
    changes: list[JSONObject]


class CatalogMessage(TypedDict):
    type: Literal["agent.catalog"]


class SupersededMessage(TypedDict):
    """A newer socket of the agent opened: every other one of `generation` or older closes."""

    type: Literal["agent.superseded"]
    generation: int
    connection: int | None


class CloseMessage(TypedDict):
    """An owner action closes the agent's sockets (revoked, disabled, reset)."""

    type: Literal["agent.close"]
    code: str
    reason: str


class DispatchWake(TypedDict):
    type: Literal["dispatch.wake"]


ChannelMessage: TypeAlias = (
    WakeMessage
    | HintMessage
    | BootstrapMessage
    | ReceiptsMessage
    | ActivityMessage
    | CatalogMessage
    | SupersededMessage
    | CloseMessage
    | DispatchWake
)


class ChannelLayer(Protocol):
    """What this module uses of a channels layer (channels is untyped)."""

    async def group_send(self, group: str, message: ChannelMessage) -> None: ...


def agent_group(agent_pk: int) -> str:
    return f"pocolobby.agent.{agent_pk}"


# The server's event loop, once `pocolobby serve` runs it: worker threads hand it their
# publishes without waiting for them.
SERVER_LOOP: dict[str, asyncio.AbstractEventLoop] = {}


def _log_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("could not publish a wake", exc_info=future.exception())


class Outbox:
    """Publishes handed from worker threads to the server's loop, many per hand-over.

    Each hand-over wakes the loop (a write to its self-pipe, a read there): the sends of
    one shared commit (pocolobby.asgi) publish together, so they share one wake-up. Kept
    per loop, so a loop that stopped with publishes pending never holds up the next one.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[
            asyncio.AbstractEventLoop, list[tuple[ChannelLayer, str, ChannelMessage]]
        ] = {}

    def hand(
        self,
        loop: asyncio.AbstractEventLoop,
        layer: ChannelLayer,
        group: str,
        message: ChannelMessage,
    ) -> None:
        with self.lock:
            waiting = self.pending.setdefault(loop, [])
            first = not waiting
            waiting.append((layer, group, message))
        if first:
            try:
                loop.call_soon_threadsafe(self.deliver, loop)
            except RuntimeError:  # the loop closed meanwhile: nothing of it will run
                with self.lock:
                    self.pending.pop(loop, None)
                raise

    def deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            batch = self.pending.pop(loop, [])
        for layer, group, message in batch:
            asyncio.ensure_future(layer.group_send(group, message)).add_done_callback(_log_failure)


OUTBOX = Outbox()


def publish(group: str, message: ChannelMessage) -> None:
    layer: ChannelLayer | None = get_channel_layer()
    if layer is None:
        return
    loop = SERVER_LOOP.get("loop")
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is not None and running is None and loop.is_running():
        # A request's worker thread: the wake needs no answer, so it does not wait for one.
        OUTBOX.hand(loop, layer, group, message)
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a lost wake is recovered by the dispatcher's tick, never by the sender
        log.warning("could not publish %s to %s", message["type"], group, exc_info=True)


def on_commit_publish(messages: Iterable[tuple[str, ChannelMessage]]) -> None:
    pending = list(messages)

    def send() -> None:
        for group, message in pending:
            publish(group, message)

    transaction.on_commit(send)


def wake_recipients_on_commit(recipients: Iterable[tuple[int, str]]) -> None:
    """After commit, wake each recipient's socket; `important` skips the batching delay."""
    on_commit_publish(
        [
            (agent_group(pk), {"type": "agent.wake", "priority": priority})
            for pk, priority in recipients
        ]
    )


def wake_dispatcher_on_commit() -> None:
    """After commit, run the dispatcher's timers now (owed receipts) instead of at its tick."""
    on_commit_publish([(DISPATCH_GROUP, {"type": "dispatch.wake"})])


def close_sockets_on_commit(agent_pk: int, code: ErrorCode, reason: str) -> None:
    """After an owner action, close the agent's open sockets (revoked, disabled, reset)."""
    on_commit_publish(
        [(agent_group(agent_pk), {"type": "agent.close", "code": code.value, "reason": reason})]
    )


def announce_catalog_on_commit(agent_pk: int) -> None:
    """After the agent's tools changed (its permissions), its bridges reload the catalog."""
    on_commit_publish([(agent_group(agent_pk), {"type": "agent.catalog"})])
