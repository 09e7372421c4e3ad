"""The HTTP and WebSocket server `pocolobby serve` runs: uvicorn on uvloop, httptools parsing.

Chosen over daphne by measurement (docs/DECISIONS.md, "Serving /v1"; docs/PERFORMANCE.md,
"Figures from code comments"): the broker is bound by Python CPU under one GIL, and daphne's
Twisted HTTP layer cost a request far more of it than uvicorn's. Everything above the ASGI
interface (Channels consumers, the /v1 fast lane, Django) is unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import http
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from lobbies.errors import ErrorCode
from lobbies.fastlane.sqlite.checkpoints import WalCheckpointer

# Frames a bridge sends are a few hundred bytes (receipts, heartbeats); a megabyte is a
# bound no honest bridge meets, and the server closes the socket (1009) past it.
WS_MAX_BYTES = 1024 * 1024
# Connections still open at SIGTERM get this long to finish before the process exits.
GRACEFUL_SECONDS = 5
# An idle keep-alive connection is closed by the client first (httpx drops idle ones after
# 5 s, uvicorn's own default): a server closing at the same moment a client reuses the
# connection would lose a request in flight.
KEEP_ALIVE_SECONDS = 75


class OneWritePerTurn:
    """A connection's transport whose writes of one event-loop turn leave in one syscall.

    uvicorn writes a response's status line and headers as soon as the application starts
    it, then its body: two writes, two packets, and on loopback two wake-ups of the client,
    for every /v1 answer. Here the writes of a turn are joined and sent at its end, in order;
    everything else is the transport's own.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.pending:
            return
        data, self.pending = b"".join(self.pending), []
        if not self.transport.is_closing():
            self.transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(map(len, self.pending))

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self.pending = []
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class HeadersTooLarge(Exception):
    """Raised from a parser callback to stop parsing a request whose headers are too large."""


class HeaderDeadline(HttpToolsProtocol):
    """httptools' protocol, bounding how long and how large a request's headers may be and
    how long its body may stall.

    uvicorn arms no timer while a request's headers arrive (its keep-alive timer is cancelled
    by any byte), so a client sending half a request line held a connection forever. Each
    request gets `seconds` from its connection or its first byte to its last header. One
    timer serves many requests: it is armed when none is (or moved earlier, when a shorter
    bound starts), and when it fires it closes the connection only if headers are still
    arriving past their time, else waits for the rest of it (a timer set and cancelled per
    request showed in the loop's time per send: docs/PERFORMANCE.md, "Figures from code
    comments").

    Headers over `header_bytes` (request line included) are answered 431 and the connection
    closed; httptools sets no bound of its own. A body that stops arriving for
    `body_stall_seconds`, or is not whole after `body_seconds`, is answered 408 (when nothing
    was answered yet) and the connection closed, so an upload stalled after two bytes cannot
    hold its reserved memory (lobbies/api/uploads.py). The same timer watches bodies; reading
    paused by uvicorn's own flow control (the application has not taken the body yet) is
    not a stall.
    """

    seconds: float = 10.0
    header_bytes: int = 64 * 1024
    body_stall_seconds: float = 30.0
    body_seconds: float = 300.0
    _deadline: asyncio.TimerHandle | None = None
    _headers_since: float | None = None  # when the headers now arriving began
    _header_size = 0  # bytes received while those headers arrive
    _too_large = False
    _body_since: float | None = None  # when the body now arriving began
    _body_last = 0.0  # when a piece of it last arrived

    def _begin_headers(self) -> None:
        self._headers_since = self.loop.time()
        self._header_size = 0
        self._arm(self.seconds)

    def _arm(self, seconds: float) -> None:
        """The timer, to fire `seconds` from now at the latest (an earlier one stays)."""
        at = self.loop.time() + seconds
        if self._deadline is not None:
            if self._deadline.when() <= at:
                return
            self._deadline.cancel()
        self._deadline = self.loop.call_at(at, self._check)

    def _check(self) -> None:
        self._deadline = None
        now = self.loop.time()
        if self._headers_since is not None:
            left = self._headers_since + self.seconds - now
        elif self._body_since is not None:
            if self.flow.read_paused:
                self._body_last = now  # we stopped reading, not the client
            left = (
                min(self._body_last + self.body_stall_seconds, self._body_since + self.body_seconds)
                - now
            )
            if left <= 0:
                self._body_timed_out()
                return
        else:
            return  # nothing arriving; the next request's first byte arms the timer again
        if left > 0:
            self._deadline = self.loop.call_later(left, self._check)
        elif not self.transport.is_closing():
            self.transport.close()

    def _body_timed_out(self) -> None:
        self._body_since = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not self.transport.is_closing():
            stalled = self.loop.time() - self._body_last >= self.body_stall_seconds
            why = (
                f"the request body stopped arriving for {self.body_stall_seconds:g} s "
                "(POCOLOBBY_BODY_STALL_SECONDS)"
                if stalled
                else f"the request body took longer than {self.body_seconds:g} s "
                "(POCOLOBBY_BODY_SECONDS)"
            )
            self._refuse(
                408, {"code": ErrorCode.BODY_TIMEOUT, "message": f"{why}; nothing was kept"}
            )
            cycle.disconnected = True  # the application reads a disconnect and answers nothing
            cycle.message_event.set()
        elif not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, error: dict[str, str]) -> None:
        """Answer `status` with the API's error shape and close the connection."""
        body = json.dumps({"error": error}).encode()
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode("latin-1") + body)
        self.transport.close()

    def _disarm(self) -> None:
        self._headers_since = None
        self._body_since = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneWritePerTurn(transport, self.loop))  # type: ignore[arg-type]
        self._begin_headers()

    def data_received(self, data: bytes) -> None:
        if self._too_large:
            return  # answered 431; the connection is closing
        counting = self._headers_since is not None
        super().data_received(data)
        # Headers still arriving after this piece: a single header growing past the bound
        # is stopped here, before the parser has buffered all of it.
        if counting and self._headers_since is not None and not self._too_large:
            self._header_size += len(data)
            if self._header_size > self.header_bytes:
                self._too_large = True
                self.send_400_response("")

    def send_400_response(self, msg: str) -> None:
        if not self._too_large:
            super().send_400_response(msg)
        elif not self.transport.is_closing():
            self._headers_since = None
            message = f"the request's headers are over {self.header_bytes} bytes"
            self._refuse(
                431,
                {
                    "code": ErrorCode.HEADERS_TOO_LARGE,
                    "message": f"{message} (POCOLOBBY_HEADER_BYTES)",
                },
            )

    def handle_websocket_upgrade(self) -> None:
        self._body_since = None  # the socket's own protocol takes the connection
        # The socket's own protocol writes frames straight to the transport, after whatever
        # this connection had still to send.
        if isinstance(self.transport, OneWritePerTurn):
            self.transport.flush()
            self.transport = self.transport.transport
        super().handle_websocket_upgrade()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._headers_since is None:
            self._begin_headers()

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)  # ": ", CRLF
        if size > self.header_bytes:
            self._too_large = True
            raise HeadersTooLarge  # the parser stops; send_400_response answers 431
        self._headers_since = None  # the timer, if it fires, finds nothing arriving
        self._body_since = self._body_last = self.loop.time()
        super().on_headers_complete()
        self._arm(self.body_stall_seconds)

    def on_body(self, body: bytes) -> None:
        self._body_last = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._body_since = None
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def _header_deadline(
    seconds: float, header_bytes: int, body_stall_seconds: float, body_seconds: float
) -> type[HeaderDeadline]:
    return type(
        "BoundHeaderDeadline",
        (HeaderDeadline,),
        {
            "seconds": seconds,
            "header_bytes": header_bytes,
            "body_stall_seconds": body_stall_seconds,
            "body_seconds": body_seconds,
        },
    )


class BrokerServer(uvicorn.Server):
    """uvicorn, plus a callback once the sockets listen (the dispatcher starts there).

    Not ASGI lifespan: uvicorn runs lifespan startup before it binds, and the operator and
    the tests read "listening on" as "connect now".
    """

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            SERVING.append(self)
            self.on_listening()


# The server this process runs (one), for stop().
SERVING: list[BrokerServer] = []


class ConnectionBounds(Protocol):
    """The bounds a connection is held to (pocolobby.config.Bounds, read from the environment)."""

    @property
    def header_seconds(self) -> float: ...
    @property
    def header_bytes(self) -> int: ...
    @property
    def body_stall_seconds(self) -> float: ...
    @property
    def body_seconds(self) -> float: ...


def stop() -> None:
    """Shut down as SIGTERM would, but return from run() (uvicorn raises a signal it caught
    again after its shutdown, so `serve` could not exit with a code and a reason of its own)."""
    for server in SERVING:
        server.should_exit = True


def run(
    application: Any,
    host: str,
    port: int,
    on_listening: Callable[[], None],
    bounds: ConnectionBounds,
) -> None:
    """Serve until SIGINT or SIGTERM; `on_listening` runs on the server's event loop."""
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        loop="uvloop",
        http=_header_deadline(
            bounds.header_seconds,
            bounds.header_bytes,
            bounds.body_stall_seconds,
            bounds.body_seconds,
        ),
        ws="websockets-sansio",
        ws_max_size=WS_MAX_BYTES,
        lifespan="off",
        # Logging stays Django's (pocolobby/settings.py); no access log, no Server header.
        log_config=None,
        access_log=False,
        server_header=False,
        # Behind a TLS proxy, Host is what the routing reads; no forwarded-header rewriting.
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    BrokerServer(config, on_listening).run()


def confine_sqlite_to_one_thread() -> None:
    """On SQLite, run all of the server's database work off the loop on one thread.

    Request bodies, sockets' database work and the dispatcher's ticks go to the loop's
    default executor (`sync_to_async(thread_sensitive=False)`). SQLite keeps a page cache per
    connection and drops it whenever another connection commits, so with a connection per
    pool thread each send re-read the pages the previous send, on another thread, had
    just written (pread, counted with strace). SQLite serializes writers anyway and the
    broker is bound by Python CPU under one GIL: one thread gives up no parallelism that
    existed, and durable sends took less CPU (docs/PERFORMANCE.md, "Figures from code
    comments").
    PostgreSQL keeps the default pool. Call on the server's loop.
    """
    # local: this module (uvicorn's setup) is importable before Django is set up
    from django.db import connection

    if connection.vendor == "sqlite":
        asyncio.get_running_loop().set_default_executor(
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite")
        )


def checkpoint_sqlite_in_the_background() -> WalCheckpointer | None:
    """On SQLite, checkpoint the WAL on a thread of its own
    (lobbies/fastlane/sqlite/checkpoints.py)."""
    # local: this module (uvicorn's setup) is importable before Django is set up
    from django.db import connection

    if connection.vendor != "sqlite":
        return None
    return WalCheckpointer(Path(connection.settings_dict["NAME"])).start()


def freeze_startup_objects() -> None:
    """Leave what startup built (Django, the apps, the catalog) out of the garbage collector.

    Every full collection walked all of it with the GIL held, and each one was the p99 of
    pushes and sends; frozen, a full collection walks only what was made since
    (docs/PERFORMANCE.md, "Figures from code comments"). A cycle among frozen
    objects is never collected, so the collection before the freeze clears startup's own.
    """
    gc.collect()
    gc.freeze()
