"""Helpers for driving the real bridge consumer with Channels' WebsocketCommunicator."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from lobbies.push import timers
from lobbies.wire.frames import (
    EVENT_VERSION,
    EVENT_VERSION_HEADER,
    GENERATION_HEADER,
    RUNTIME_HEADER,
)
from pocolobby.asgi import application


def new_runtime() -> str:
    return str(uuid.uuid4())


async def open_stream(
    token: str,
    runtime: str,
    generation: int | None = None,
    version: str | None = str(EVENT_VERSION),
    extra: list[tuple[bytes, bytes]] | None = None,
) -> WebsocketCommunicator:
    headers = [
        (b"authorization", f"Bearer {token}".encode()),
        (RUNTIME_HEADER.lower().encode(), runtime.encode()),
    ]
    if version is not None:
        headers.append((EVENT_VERSION_HEADER.lower().encode(), version.encode()))
    if generation is not None:
        headers.append((GENERATION_HEADER.lower().encode(), str(generation).encode()))
    communicator = WebsocketCommunicator(application, "/v1/stream", headers=headers + (extra or []))
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def frame(communicator: WebsocketCommunicator, timeout: float = 3) -> dict[str, Any]:
    return await communicator.receive_json_from(timeout=timeout)


async def closed_with(communicator: WebsocketCommunicator) -> tuple[dict[str, Any], int]:
    """The error frame of a refusal and the close code that follows it."""
    error = await frame(communicator)
    output = await communicator.receive_output(timeout=3)
    assert output["type"] == "websocket.close", output
    return error, output["code"]


async def bootstrapped(communicator: WebsocketCommunicator) -> tuple[dict, dict]:
    """Read the welcome and the bootstrap notice of a newly started process."""
    welcome = await frame(communicator)
    assert welcome["type"] == "welcome" and welcome["bootstrap"] is True, welcome
    notice = await frame(communicator)
    assert notice["notice_kind"] == "bootstrap", notice
    return welcome, notice


async def settled(communicator: WebsocketCommunicator) -> None:
    """Wait until the consumer has finished connecting.

    The consumer handles one event at a time, so a heartbeat's answer comes after the
    connect's last push round. A send made before that round ends may be pushed by it
    alone, outside any batch window a test sets.
    """
    await communicator.send_json_to({"type": "heartbeat"})
    answer = await frame(communicator)
    assert answer["type"] == "heartbeat", answer


async def run_tick(now: datetime) -> None:
    """One dispatcher pass at `now`, publishing what it decided, as the real loop does."""
    result = await database_sync_to_async(timers.tick)(now)
    layer = get_channel_layer()
    for group, message in result.publish:
        await layer.group_send(group, message)


def sync(fn: Any) -> Any:
    return database_sync_to_async(fn)
