"""A TCP proxy in front of the broker, for cutting the network under a running bridge.

Not a test module. `cut()` resets every open connection and refuses new ones, like a lost
network or a proxy restart; `restore()` listens again on the same port. It forwards bytes
only, so HTTP and the WebSocket both pass through it unchanged. It can also delay the
broker's answers (`delay`), and it watches the bridge's side of each stream for WebSocket
close frames (`closes`: when, and with which code), and records the request line of every
plain HTTP request (`requests`, e.g. "PUT /v1/attachments/<sha256> HTTP/1.1"), without
altering a byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from tests.server import free_port

CLOSE_OPCODE = 0x8


@dataclass(frozen=True)
class CloseFrame:
    at: float  # time.perf_counter() when the proxy read it
    code: int | None


class CloseWatch:
    """Parses the client's bytes of one connection: the upgrade request, then frames; or,
    on a plain HTTP connection, each request's line (bodies by their Content-Length)."""

    def __init__(self, closes: list[CloseFrame], requests: list[str] | None = None) -> None:
        self.closes = closes
        self.requests = requests if requests is not None else []
        self.buffer = b""
        self.stream: bool | None = None  # unknown until the request line is read
        self.body_left = 0

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if self.stream is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.stream = self.buffer.startswith(b"GET /v1/stream")
            if self.stream:
                self.buffer = self.buffer[end + 4 :]
        if self.stream is False:
            self._requests()
            return
        while self._frame():
            pass

    def _requests(self) -> None:
        while True:
            if self.body_left:
                skipped = min(self.body_left, len(self.buffer))
                self.buffer = self.buffer[skipped:]
                self.body_left -= skipped
                if self.body_left:
                    return
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            line, *headers = self.buffer[:end].decode("latin-1").split("\r\n")
            self.buffer = self.buffer[end + 4 :]
            self.requests.append(line)
            for header in headers:
                name, _, value = header.partition(":")
                if name.strip().lower() == "content-length":
                    self.body_left = int(value.strip())

    def _frame(self) -> bool:
        data = self.buffer
        if len(data) < 2:
            return False
        opcode, length, start = data[0] & 0x0F, data[1] & 0x7F, 2
        if length == 126:
            if len(data) < 4:
                return False
            length, start = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            if len(data) < 10:
                return False
            length, start = int.from_bytes(data[2:10], "big"), 10
        mask = b""
        if data[1] & 0x80:
            mask, start = data[start : start + 4], start + 4
        if len(data) < start + length:
            return False
        payload = data[start : start + length]
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.buffer = data[start + length :]
        if opcode == CLOSE_OPCODE:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
            self.closes.append(CloseFrame(time.perf_counter(), code))
        return True


class Proxy:
    def __init__(self, target_port: int, *, delay: float = 0.0) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.delay = delay
        self.closes: list[CloseFrame] = []
        self.requests: list[str] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        watch = CloseWatch(self.closes, self.requests)
        await asyncio.gather(
            self._pipe(reader, up_writer, watch=watch),
            self._pipe(up_reader, writer, delay=self.delay),
            return_exceptions=True,
        )
        self._writers.difference_update((writer, up_writer))

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        watch: CloseWatch | None = None,
        delay: float = 0.0,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if watch is not None:
                    watch.feed(data)
                if delay:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            transport = writer.transport
            with contextlib.suppress(Exception):
                transport.abort()
        self._writers.clear()
        await asyncio.sleep(0)

    async def restore(self) -> None:
        await self.start()

    async def close(self) -> None:
        await self.cut()
