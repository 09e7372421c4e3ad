"""The stdio wire to the host (Claude Code): newline-delimited JSON-RPC with confirmed writes.

The SDK's own stdio transport hands a message to a writer task and returns before the bytes
reach stdout, but the broker's `host_written` fact must mean the write succeeded. So this
transport writes each line itself and returns only once the line is in the pipe (an asyncio
write pipe with a zero buffer limit, drained). The dispatcher's responses and our own
notifications go through the same lock, so lines never interleave.

While serving, fd 0 reads /dev/null and fd 1 goes to stderr, so a stray print from any
library lands in the log instead of corrupting the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from typing import BinaryIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    jsonrpc_message_adapter,
)

from lobbies.wire.jsontext import (
    MAX_JSON_DEPTH,
    JSONObject,
    JsonTooDeep,
    check_json_nesting,
    scalar_members,
)

log = logging.getLogger("pocolobby.bridge.host")

MAX_LINE_BYTES = 32 * 1024 * 1024
# How deeply a line may nest: a tool call's arguments sit four levels down (the message, its
# params, the arguments, an operation's arguments) and the broker lets each nest
# MAX_JSON_DEPTH. Deeper lines are answered unparsed: the SDK's parser stops at 200 levels
# and the standard one raises RecursionError near 1,000.
LINE_DEPTH = MAX_JSON_DEPTH + 4
# The id of a line too deep to parse is looked for in lines up to this size only.
ID_SEARCH_BYTES = 1024 * 1024


class HostGone(Exception):
    """The host closed its end of stdout; nothing more can be written."""


class HostPipe:
    """Reads requests from the host and writes lines to it, each write confirmed."""

    def __init__(self, wire_in: BinaryIO, wire_out: BinaryIO) -> None:
        self._in = wire_in
        self._out = wire_out
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lines: asyncio.Queue[bytes] | None = None
        self._closed = False

    @classmethod
    async def open_stdio(cls) -> HostPipe:
        """Serve on this process's stdin/stdout, diverting fds 0 and 1 meanwhile."""
        wire_in, wire_out = _claim_standard_fds()
        pipe = cls(os.fdopen(wire_in, "rb", buffering=0), os.fdopen(wire_out, "wb", buffering=0))
        await pipe._connect()
        return pipe

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self._in)
            self._reader = reader
        except (ValueError, OSError):
            # Not a pipe, socket or tty (a regular file): read it on a daemon thread.
            self._lines = asyncio.Queue()
            threading.Thread(target=self._read_thread, args=(loop,), daemon=True).start()
        try:
            transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, self._out
            )
            transport.set_write_buffer_limits(high=0)  # drain() returns once the pipe has it all
            self._writer = asyncio.StreamWriter(transport, protocol, None, loop)
        except (ValueError, OSError):
            self._writer = None  # write synchronously (a regular file never blocks for long)

    def _read_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._lines is not None
        lines = self._lines
        while True:
            try:
                line = self._in.readline(MAX_LINE_BYTES)
            except (OSError, ValueError):
                line = b""
            loop.call_soon_threadsafe(lines.put_nowait, line)
            if not line:
                return

    async def _readline(self) -> bytes | Exception:
        """The next line; b"" at end of input; an exception for a line over the limit."""
        if self._reader is not None:
            try:
                return await self._reader.readline()
            except ValueError as exc:  # the reader has dropped the over-long line
                return exc
        assert self._lines is not None
        return await self._lines.get()

    async def pump(self, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        """Parse each line from the host onto `send`; close it at end of input."""
        async with send:
            while True:
                line = await self._readline()
                if isinstance(line, Exception):
                    log.warning("ignored a line from the host over %d bytes", MAX_LINE_BYTES)
                    await self._answer_bad_line(
                        PARSE_ERROR, f"Parse error: a line over {MAX_LINE_BYTES} bytes", None
                    )
                    continue
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    if line.count(b"[") + line.count(b"{") > LINE_DEPTH:
                        check_json_nesting(line, LINE_DEPTH, "the message")
                except JsonTooDeep as exc:
                    await self._refuse_deep_line(line, str(exc))
                    continue
                try:
                    message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception:  # a bad line is answered, never fatal
                    await self._refuse_line(line)
                    continue
                await send.send(SessionMessage(message))

    async def _refuse_line(self, line: bytes) -> None:
        """JSON-RPC 2.0's answers: -32700 for a line that is not JSON, -32600 for a request
        that is JSON but not a valid request (with its id when it has one)."""
        try:
            data = json.loads(line)
        except ValueError:
            log.warning("answered -32700 to a line from the host that is not JSON")
            await self._answer_bad_line(PARSE_ERROR, "Parse error: the line is not JSON", None)
            return
        raw_id = data.get("id") if isinstance(data, dict) else None
        if isinstance(data, dict) and "method" not in data and "id" in data:
            log.warning("ignored a response from the host that is not valid JSON-RPC")
            return  # a malformed response has no one to answer
        valid_id = isinstance(raw_id, str | int) and not isinstance(raw_id, bool)
        request_id = raw_id if valid_id and isinstance(raw_id, str | int) else None
        log.warning("answered -32600 to a line from the host that is not a JSON-RPC message")
        await self._answer_bad_line(
            INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message", request_id
        )

    async def _refuse_deep_line(self, line: bytes, why: str) -> None:
        """A line nesting past LINE_DEPTH: a request is answered -32602 (its params are what
        nests) with its id, found without parsing; anything else -32600; a notification or a
        response nothing."""
        members = scalar_members(line) if len(line) <= ID_SEARCH_BYTES else {}
        raw_id = members.get("id")
        valid_id = isinstance(raw_id, str | int) and not isinstance(raw_id, bool)
        request_id = raw_id if valid_id and isinstance(raw_id, str | int) else None
        if isinstance(members.get("method"), str):
            if request_id is None:
                log.warning("ignored a notification from the host nesting too deeply")
                return
            log.warning("answered -32602 to a request from the host nesting too deeply")
            await self._answer_bad_line(INVALID_PARAMS, f"Invalid params: {why}", request_id)
            return
        if "id" in members:
            log.warning("ignored a response from the host nesting too deeply")
            return
        log.warning("answered -32600 to a line from the host nesting too deeply")
        await self._answer_bad_line(INVALID_REQUEST, f"Invalid Request: {why}", None)

    async def _answer_bad_line(self, code: int, text: str, request_id: str | int | None) -> None:
        error = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=text))
        with contextlib.suppress(HostGone):
            await self.write(error)

    async def write(self, message: JSONRPCMessage) -> None:
        """Write one message as a line; return only once it is in the pipe, else HostGone."""
        data = (message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()
        async with self._lock:
            if self._closed:
                raise HostGone("the host's stdout is closed")
            try:
                if self._writer is not None:
                    if self._writer.transport.is_closing():
                        raise ConnectionResetError("the host closed stdout")
                    self._writer.write(data)
                    await self._writer.drain()
                else:
                    self._out.write(data)
                    self._out.flush()
            except (OSError, RuntimeError) as exc:
                self._closed = True
                raise HostGone(str(exc) or type(exc).__name__) from exc

    async def notify(self, method: str, params: JSONObject | None = None) -> None:
        """An unsolicited notification, outside any request; HostGone if it was not written."""
        if params is None:
            message = JSONRPCNotification(jsonrpc="2.0", method=method)
        else:
            message = JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
        await self.write(message)

    def streams(
        self,
    ) -> tuple[
        MemoryObjectSendStream[SessionMessage | Exception],
        MemoryObjectReceiveStream[SessionMessage | Exception],
        DispatcherWrites,
    ]:
        """The read side (fed by `pump`) and a write side for the SDK's dispatcher."""
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        return send, receive, DispatcherWrites(self)

    def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()


class DispatcherWrites:
    """The SDK dispatcher's write stream: every response goes through `HostPipe.write`."""

    def __init__(self, host: HostPipe) -> None:
        self._host = host

    async def send(self, item: SessionMessage, /) -> None:
        try:
            await self._host.write(item.message)
        except HostGone:
            raise anyio.BrokenResourceError from None

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> DispatcherWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def _claim_standard_fds() -> tuple[int, int]:
    """Private duplicates of fds 0 and 1 for the wire; fd 0 then reads /dev/null, fd 1 is stderr."""
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    try:
        sys.stdout.flush()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
    except OSError:
        log.debug("could not divert fds 0 and 1; stray output may reach the host", exc_info=True)
    return wire_in, wire_out
