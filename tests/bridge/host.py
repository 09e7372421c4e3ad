"""A simulated Claude Code host: starts `python -m pocolobby bridge` as a real subprocess and
drives it with the mcp SDK's `ClientSession` over its stdin/stdout.

Not a test module; it does not import pytest or Django. Channel events are collected from the
SDK's notification binding for `notifications/claude/channel`, each stamped with the
`time.perf_counter()` of its arrival, and every wait has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ConfigDict

from pocolobby.bridge.core import CONTEXT_FIRST
from tests.server import REPO_ROOT, clean_env

EVENT_TIMEOUT = 15.0
CHANNEL = "notifications/claude/channel"


class ChannelParams(BaseModel):
    """Exactly what a Claude Channel event carries: nothing else is allowed."""

    model_config = ConfigDict(extra="forbid")
    content: str
    meta: dict[str, str]


@dataclass(frozen=True)
class ChannelEvent:
    content: str
    meta: dict[str, str]
    at: float

    @property
    def headline(self) -> str:
        return self.content.split("\n", 1)[0]

    @property
    def payload(self) -> dict[str, Any]:
        _, _, rest = self.content.partition("\n")
        try:
            return json.loads(rest.split("\n\n", 1)[0])
        except ValueError:
            return {}

    @property
    def message_ids(self) -> list[int]:
        payload = self.payload
        if "messages" in payload:
            return [m["message_id"] for m in payload["messages"]]
        if "backlog" in payload:
            return list(payload["backlog"]["message_ids"])
        return list(payload.get("message_ids", []))


@dataclass
class ToolAnswer:
    """A tool result as the model reads it: the text, parsed as JSON when it is JSON."""

    is_error: bool
    text: str
    data: Any = None
    # The bridge's leading advice before get_context was called (CONTEXT_FIRST), kept apart
    # so `text` and `data` are the tool's own answer.
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, result: types.CallToolResult) -> ToolAnswer:
        texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
        notes = []
        while len(texts) > 1 and texts[0] == CONTEXT_FIRST:
            notes.append(texts.pop(0))
        text = "".join(texts)
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return cls(result.is_error, text, data, notes)


@dataclass
class Host:
    """One simulated Claude Code session running one bridge process."""

    config_path: Path
    session_id: str | None
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # The command line to start the bridge; by default this Python running the package.
    command: list[str] | None = None
    # Extra arguments after `bridge --config FILE`, e.g. ["--verbose"].
    bridge_args: list[str] = field(default_factory=list)
    events: list[ChannelEvent] = field(default_factory=list)
    list_changed: int = 0
    # Every error answer as written; those with "id": null are kept off the session.
    wire_errors: list[dict[str, Any]] = field(default_factory=list)
    exited_at: float | None = None
    process: anyio.abc.Process | None = None
    session: ClientSession | None = None
    initialize_result: types.InitializeResult | None = None
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _log: IO[bytes] | None = None

    # ------------------------------------------------------------ lifecycle

    def env(self) -> dict[str, str]:
        extra = dict(self.extra_env)
        if self.session_id is not None:
            extra["CLAUDE_CODE_SESSION_ID"] = self.session_id
        env = clean_env(extra)
        if self.session_id is None:
            env.pop("CLAUDE_CODE_SESSION_ID", None)
        return env

    async def start(self, *, initialize: bool = True) -> Host:
        self._log = self.log_path.open("ab")
        command = self.command or [
            sys.executable,
            "-m",
            "pocolobby",
            "bridge",
            "--config",
            str(self.config_path),
            *self.bridge_args,
        ]
        self.process = await anyio.open_process(
            command,
            cwd=REPO_ROOT,
            env=self.env(),
            stderr=self._log,
        )
        reads_send, reads = anyio.create_memory_object_stream[SessionMessage | Exception](64)
        writes, writes_receive = anyio.create_memory_object_stream[SessionMessage](64)
        tasks = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(tasks.cancel_scope.cancel)
        tasks.start_soon(self._pump_stdout, reads_send)
        tasks.start_soon(self._pump_stdin, writes_receive)
        self.session = await self._stack.enter_async_context(
            ClientSession(
                reads,
                writes,
                read_timeout_seconds=60,
                message_handler=self._on_message,
                notification_bindings=[
                    NotificationBinding(
                        method=CHANNEL, params_type=ChannelParams, handler=self._on_channel
                    )
                ],
            )
        )
        if initialize:
            self.initialize_result = await self.session.initialize()
        return self

    async def _pump_stdout(self, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        assert self.process is not None and self.process.stdout is not None
        buffer = b""
        async with send:
            with contextlib.suppress(
                anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError
            ):
                async for chunk in self.process.stdout:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            message = types.jsonrpc_message_adapter.validate_json(line)
                            if isinstance(message, types.JSONRPCError):
                                async with self._arrived:
                                    self.wire_errors.append(json.loads(line))
                                    self._arrived.notify_all()
                                if message.id is None:
                                    continue
                            await send.send(SessionMessage(message))

    async def _pump_stdin(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        assert self.process is not None and self.process.stdin is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for item in receive:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                await self.process.stdin.send(data.encode() + b"\n")

    async def _on_channel(self, params: ChannelParams) -> None:
        async with self._arrived:
            self.events.append(ChannelEvent(params.content, params.meta, time.perf_counter()))
            self._arrived.notify_all()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            async with self._arrived:
                self.list_changed += 1
                self._arrived.notify_all()

    async def close(self) -> int | None:
        """Close stdin like a host that quits; the bridge should exit by itself."""
        if self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(Exception):
                await self.process.stdin.aclose()
        code = await self._reap(graceful=10.0)
        await self._stack.aclose()
        return code

    async def send_raw(self, line: bytes) -> None:
        """Write bytes to the bridge's stdin as they are, outside the SDK session."""
        assert self.process is not None and self.process.stdin is not None
        await self.process.stdin.send(line)

    async def signal(self, signum: int) -> float:
        """Send `signum` to the bridge; the perf_counter() of sending it."""
        assert self.process is not None
        sent = time.perf_counter()
        os.kill(self.process.pid, signum)
        return sent

    async def exited(self, timeout: float = 10.0) -> int | None:
        """Wait for the process to end by itself (not killed); its exit code, and `exited_at`."""
        assert self.process is not None
        with anyio.move_on_after(timeout):
            await self.process.wait()
            self.exited_at = time.perf_counter()
        code = await self._reap(graceful=0)
        with contextlib.suppress(Exception):
            await self._stack.aclose()
        return code if self.exited_at is not None else None

    async def kill(self) -> None:
        """SIGKILL the bridge: no shutdown code runs, like a crash."""
        if self.process is not None and self.process.returncode is None:
            os.kill(self.process.pid, signal.SIGKILL)
        await self._reap(graceful=10.0)
        with contextlib.suppress(Exception):
            await self._stack.aclose()

    async def _reap(self, graceful: float) -> int | None:
        if self.process is None:
            return None
        with anyio.move_on_after(graceful):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.process.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # ------------------------------------------------------------ the model's side

    async def call(self, tool: str, **arguments: Any) -> ToolAnswer:
        assert self.session is not None
        return ToolAnswer.of(await self.session.call_tool(tool, arguments))

    async def ok(self, tool: str, **arguments: Any) -> Any:
        answer = await self.call(tool, **arguments)
        assert not answer.is_error, f"{tool} failed: {answer.text}\nbridge log:\n{self.log_text()}"
        return answer.data

    async def tool_names(self) -> list[str]:
        assert self.session is not None
        return [t.name for t in (await self.session.list_tools()).tools]

    async def event(
        self,
        match: Callable[[ChannelEvent], bool] = lambda e: True,
        *,
        after: int = 0,
        timeout: float = EVENT_TIMEOUT,
    ) -> ChannelEvent:
        """The first event at index `after` or later that matches."""
        found = await self._wait(
            lambda: next((e for e in self.events[after:] if match(e)), None), timeout
        )
        assert found is not None
        return found

    async def bootstrap(self, *, after: int = 0, timeout: float = EVENT_TIMEOUT) -> ChannelEvent:
        return await self.event(
            lambda e: e.meta.get("scope") == "bootstrap", after=after, timeout=timeout
        )

    async def message_event(
        self, message_id: int, *, timeout: float = EVENT_TIMEOUT
    ) -> ChannelEvent:
        return await self.event(
            lambda e: e.meta.get("scope") != "bootstrap" and message_id in e.message_ids,
            timeout=timeout,
        )

    async def bootstrapped(self) -> tuple[ChannelEvent, Any]:
        """Wait for the bootstrap, load the context and echo the nonce, as a model does."""
        event = await self.bootstrap()
        context = await self.ok("get_context")
        await self.ok("ready", nonce=event.payload["nonce"])
        return event, context

    async def wait_list_changed(self, count: int, timeout: float = EVENT_TIMEOUT) -> None:
        await self._wait(lambda: self.list_changed >= count or None, timeout)

    async def _wait(self, probe: Callable[[], Any], timeout: float) -> Any:
        async def until() -> Any:
            async with self._arrived:
                while (value := probe()) is None:
                    await self._arrived.wait()
                return value

        try:
            return await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"nothing matched within {timeout}s; events so far: "
                f"{[e.headline for e in self.events]}\nbridge log:\n{self.log_text()}"
            ) from None

    async def nothing_more(self, seconds: float = 1.0) -> None:
        """No new event for `seconds`; the bridge's repeats of an unanswered bootstrap (the
        same event again) are not new."""
        count = len(self.events)
        await asyncio.sleep(seconds)
        seen = {(e.content, tuple(sorted(e.meta.items()))) for e in self.events[:count]}
        new = [
            e
            for e in self.events[count:]
            if e.meta.get("scope") != "bootstrap"
            or (e.content, tuple(sorted(e.meta.items()))) not in seen
        ]
        assert not new, [e.headline for e in new]
