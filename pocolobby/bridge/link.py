"""The push stream: one WebSocket to the broker, held for the life of the process.

The first connect presents no generation, so the broker binds (or resumes) this conversation
under a new generation and sends a bootstrap. Every reconnect presents that generation, so a
partitioned process cannot come back after a newer one took over. A refusal (close 4401,
4403, 4409, 4426, ...) stops the loop for good; the MCP server keeps running and reports the
state in tool results. The exception is a new conversation refused with `runtime_conflict`
before it was ever admitted: it waits for the owner's hand over (or the holder's clean end),
asking again every few seconds, and is admitted without a restart. Anything else (network
loss, a broker restart) reconnects with jittered exponential backoff. When the host ends the
process, the bridge sends `release` before closing: the conversation ended cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from lobbies.wire.errors import ErrorCode
from lobbies.wire.frames import (
    EVENT_VERSION,
    EVENT_VERSION_HEADER,
    FRAME_CATALOG,
    FRAME_ERROR,
    FRAME_HEARTBEAT,
    FRAME_NOTICE,
    FRAME_RELEASE,
    FRAME_WELCOME,
    GENERATION_HEADER,
    MAX_PUSH_FRAME_BYTES,
    RUNTIME_HEADER,
    BridgeFrame,
    CatalogFrame,
    ErrorFrame,
    FrameRefused,
    HeartbeatFrame,
    NoticeFrame,
    ReleaseFrame,
    WelcomeFrame,
    parse_catalog,
    parse_error,
    parse_heartbeat,
    parse_notice,
    parse_welcome,
)
from lobbies.wire.jsontext import PARSE_DEPTH, load_json
from lobbies.wire.terminal import for_terminal
from pocolobby.bridge import bridge_version
from pocolobby.bridge.core import Bridge
from pocolobby.bridge.results import Stop
from pocolobby.bridge.stream import SendFrame

log = logging.getLogger("pocolobby.bridge.link")

HEARTBEAT_SECONDS = 30.0
BACKOFF_FIRST = 0.25
BACKOFF_CAP = 10.0
OPEN_TIMEOUT = 10.0
STABLE_SECONDS = 5.0
# How often a conversation waiting for a hand over asks for the agent again.
WAITING_SECONDS = 3.0
MAX_FRAME_BYTES = 4 * 1024 * 1024  # the socket's bound; a frame past it drops the connection
# The largest push the bridge takes: the broker's own limit (POCOLOBBY_PUSH_BYTES, 32 KiB by
# default, at most 64 KiB) sits below it, so it can be tuned on the server without a bridge
# update.
MAX_PUSH_BYTES = MAX_PUSH_FRAME_BYTES
# Close codes that name a refusal; each code's reason is in the error frame before it.
_CODES = {
    4400: ErrorCode.INVALID_RUNTIME,
    4401: ErrorCode.INVALID_TOKEN,
    4403: ErrorCode.AGENT_DISABLED,
    4409: ErrorCode.RUNTIME_CONFLICT,
    4426: ErrorCode.BRIDGE_OUTDATED,
}


def stream_url(url: str) -> str:
    """http(s)://host[/prefix] -> ws(s)://host[/prefix]/v1/stream."""
    url = url.rstrip("/")
    if url.startswith("https://"):
        return "wss://" + url.removeprefix("https://") + "/v1/stream"
    return "ws://" + url.removeprefix("http://") + "/v1/stream"


def backoff(attempt: int) -> float:
    """Exponential with equal jitter: half the step fixed, half random, capped."""
    step = min(BACKOFF_CAP, BACKOFF_FIRST * 2.0**attempt)
    return step / 2 + random.uniform(0, step / 2)


@dataclass
class _Socket:
    """What one connection showed before it closed: a welcome, a refusal's code and words."""

    welcomed: bool = False
    refusal_code: str | None = None
    refusal_message: str = ""


class Link:
    """Connect, read frames into the bridge, reconnect, stop on a refusal."""

    def __init__(self, bridge: Bridge, token: str) -> None:
        self.bridge = bridge
        self.token = token
        self.url = stream_url(bridge.config.url)
        self._socket: ClientConnection | None = None
        self._closing = False
        self._waiting = False  # refused with runtime_conflict at start: asking again
        bridge.stream.recheck = self.recheck

    def recheck(self) -> None:
        """Close the current socket; the loop reconnects presenting our generation."""
        socket = self._socket
        if socket is not None:
            self.bridge.background.spawn(socket.close(code=1000, reason="recheck"))

    async def close(self, timeout: float) -> None:
        """The host ended this process: release the agent (this conversation ended cleanly),
        stop reconnecting and close the socket with 1001 (going away), waiting at most
        `timeout` for the broker's answering close frame: the host gives us ~100 ms to quit.
        Without an open socket nothing is released: the broker keeps the binding."""
        self._closing = True
        socket = self._socket
        if socket is None:
            return
        if self.bridge.stream.welcomed and self.bridge.stream.stop is None:
            with contextlib.suppress(Exception):
                release: ReleaseFrame = {"type": FRAME_RELEASE}
                await asyncio.wait_for(socket.send(json.dumps(release)), timeout)
        # The close frame goes out at once; only the wait for the broker's answer is bounded.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(socket.close(code=1001, reason="the host quit"), timeout)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self.token}",
            EVENT_VERSION_HEADER: str(EVENT_VERSION),
            RUNTIME_HEADER: self.bridge.runtime.runtime_id,
        }
        if self.bridge.generation is not None:
            headers[GENERATION_HEADER] = str(self.bridge.generation)
        return headers

    async def run(self) -> None:
        attempt = 0
        while (self.bridge.stream.stop is None or self._waiting) and not self._closing:
            seen = _Socket()
            code: int | None = None
            started = asyncio.get_running_loop().time()
            try:
                async with connect(
                    self.url,
                    additional_headers=self._headers(),
                    user_agent_header=f"pocolobby-bridge/{bridge_version()}",
                    compression=None,
                    open_timeout=OPEN_TIMEOUT,
                    close_timeout=5,
                    max_size=MAX_FRAME_BYTES,
                ) as socket:
                    self._socket = socket
                    try:
                        await self._serve(socket, seen)
                    finally:
                        self._socket = None
                    code = socket.close_code
                reason = f"the stream closed ({code})"
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
                reason = f"the stream closed ({code})" if code else "the connection dropped"
            except InvalidURI as exc:
                await self.bridge.on_stop(Stop("invalid_url", None, str(exc)))
                return
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                reason = f"cannot reach {self.url}: {type(exc).__name__}: {exc}"
            if code is not None and 4000 <= code < 5000:
                fallback = _CODES.get(code, f"closed_{code}")
                stop = Stop(seen.refusal_code or fallback, code - 4000, seen.refusal_message)
                self._waiting = (
                    stop.code == ErrorCode.RUNTIME_CONFLICT and not self.bridge.stream.welcomed
                )
                if not self._waiting:
                    self.bridge.stream.end_wait()  # a final refusal replaces the wait's
                    await self.bridge.on_stop(stop)
                    return
                if self.bridge.stream.stop is None:  # the session is told once, not every ask
                    await self.bridge.on_stop(stop)
                await asyncio.sleep(WAITING_SECONDS + random.uniform(0, 1))
                continue
            # A connection that held a while starts the backoff over; one that flaps does not.
            held = asyncio.get_running_loop().time() - started >= STABLE_SECONDS
            attempt = 0 if seen.welcomed and held else attempt + 1
            if self._closing:
                return
            self.bridge.stream.disconnected(reason)
            # A broker restart (1012) is routine; a first failure otherwise is worth a line.
            quiet = attempt > 1 or code == 1012
            (log.info if quiet else log.warning)(
                "%s; reconnecting (attempt %d)", reason, attempt + 1
            )
            await asyncio.sleep(backoff(attempt))

    async def _serve(self, socket: ClientConnection, seen: _Socket) -> None:
        """Read frames until the socket closes."""

        async def send(frame: BridgeFrame) -> None:
            await socket.send(json.dumps(frame))

        heartbeat = asyncio.ensure_future(self._heartbeat(socket))
        self.bridge.stream.send_frame = send
        reader = _Reader(self.bridge, seen, send)
        try:
            async for raw in socket:
                await reader.take(raw)
        finally:
            if self.bridge.stream.send_frame is send:
                self.bridge.stream.send_frame = None
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _heartbeat(self, socket: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await asyncio.sleep(HEARTBEAT_SECONDS)
                beat: HeartbeatFrame = {"type": FRAME_HEARTBEAT}
                await socket.send(json.dumps(beat))


def _refuse_oversized(frame: Mapping[str, object], size: int) -> None:
    """Neither written to the host nor confirmed: the broker's facts show it never arrived."""
    ids = frame.get("message_ids")
    log.warning(
        "refused a %d-byte %s frame from the broker (notice %s, messages %s): pushes are at "
        "most %d bytes; nothing was written to the session or confirmed, so the broker keeps "
        "them pending (get_messages reads them); lower POCOLOBBY_PUSH_BYTES on the broker",
        size,
        str(frame.get("type"))[:40],
        str(frame.get("notice_id"))[:64],
        ids[:20] if isinstance(ids, list) else "none",
        MAX_PUSH_BYTES,
    )


Frame = TypeVar("Frame", WelcomeFrame, NoticeFrame, ErrorFrame, HeartbeatFrame, CatalogFrame)


class _Take(Protocol):
    async def __call__(self, frame: Mapping[str, object]) -> None: ...


@dataclass(frozen=True)
class _Route(Generic[Frame]):
    """One frame type: its parser (lobbies.wire) and what the bridge does with the frame."""

    kind: str
    parse: Callable[[Mapping[str, object]], Frame]
    handle: Callable[[Frame], Awaitable[None]]

    async def __call__(self, frame: Mapping[str, object]) -> None:
        try:
            parsed = self.parse(frame)
        except FrameRefused as refused:  # the broker's bug or another version's: say which
            log.warning("refused a %s frame from the broker: %s", self.kind, refused)
            return
        await self.handle(parsed)


class _Reader:
    """The frames of one socket, each parsed by its type's parser and handed on."""

    def __init__(self, bridge: Bridge, seen: _Socket, send: SendFrame) -> None:
        self.bridge = bridge
        self.seen = seen
        self.send = send
        self.routes: dict[str, _Take] = {
            FRAME_WELCOME: _Route(FRAME_WELCOME, parse_welcome, self._welcome),
            FRAME_NOTICE: _Route(FRAME_NOTICE, parse_notice, self._notice),
            FRAME_ERROR: _Route(FRAME_ERROR, parse_error, self._error),
            FRAME_CATALOG: _Route(FRAME_CATALOG, parse_catalog, self._catalog),
            FRAME_HEARTBEAT: _Route(FRAME_HEARTBEAT, parse_heartbeat, self._heartbeat),
        }

    async def take(self, raw: str | bytes) -> None:
        """Parse one frame and hand it on; a frame that is refused is logged and dropped."""
        try:
            frame = load_json(raw, PARSE_DEPTH, "the frame")
        except ValueError:
            log.warning("ignored a frame that is not JSON or nests too deeply")
            return
        if not isinstance(frame, dict):
            log.warning("ignored a frame that is not a JSON object")
            return
        size = len(raw.encode() if isinstance(raw, str) else raw)
        if size > MAX_PUSH_BYTES:
            _refuse_oversized(frame, size)
            return
        kind = frame.get("type")
        route = self.routes.get(kind) if isinstance(kind, str) else None
        if route is None:
            log.debug("ignored a frame of type %s", for_terminal(kind)[:40])
            return
        await route(frame)

    async def _welcome(self, frame: WelcomeFrame) -> None:
        self.seen.welcomed = True
        self.bridge.on_welcome(frame)
        self.bridge.notices.report_delivery()

    async def _notice(self, frame: NoticeFrame) -> None:
        await self.bridge.notices.on_notice(frame, self.send)

    async def _error(self, frame: ErrorFrame) -> None:
        if "status" in frame:  # a refusal: the close that follows makes it final
            self.seen.refusal_code = frame["code"] or None
            self.seen.refusal_message = frame["message"]
        else:
            log.warning(
                "the broker answered a frame with %s: %s",
                for_terminal(frame["code"]),
                for_terminal(frame["message"]),
            )

    async def _catalog(self, frame: CatalogFrame) -> None:
        self.bridge.catalog_announced(frame["revision"])

    async def _heartbeat(self, frame: HeartbeatFrame) -> None:
        """The broker's answer to ours: the stream is alive (nothing more to do)."""
