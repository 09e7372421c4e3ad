"""A simulated agent session for the browser tests: tests/bridge/host.py's real bridge
subprocess, driven on its own event loop in a thread, since Playwright's sync API owns the
test's thread. Not a test module."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tests.bridge.host import ChannelEvent, Host

T = TypeVar("T")


class AgentSession:
    """One agent's bridge, bootstrapped and ready, whose Channel events the test can read."""

    def __init__(self, directory: Path, url: str, token: str, lobby: str, agent: str) -> None:
        config = directory / f"{agent}.json"
        config.write_text(json.dumps({"url": url, "token": token, "lobby": lobby, "agent": agent}))
        config.chmod(0o600)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.host = Host(config, str(uuid.uuid4()), directory / f"{agent}-bridge.log")

    def _run(self, work: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def start(self) -> AgentSession:
        """Start and later close the bridge in one task: its task groups must exit there."""
        started: asyncio.Future[None] = self.loop.create_future()
        self.stop = asyncio.Event()

        async def lifetime() -> int | None:
            try:
                await self.host.start()
                await self.host.bootstrapped()
            except BaseException as error:
                started.set_exception(error)
                raise
            started.set_result(None)
            await self.stop.wait()
            return await self.host.close()

        self.lifetime = asyncio.run_coroutine_threadsafe(lifetime(), self.loop)
        self._run(self._started(started))
        return self

    @staticmethod
    async def _started(started: asyncio.Future[None]) -> None:
        await started

    def event_from(self, sender: str, timeout: float = 20) -> ChannelEvent:
        return self._run(
            self.host.event(lambda e: e.meta.get("from") == sender, timeout=timeout), timeout + 5
        )

    def call(self, tool: str, **arguments: Any) -> Any:
        return self._run(self.host.ok(tool, **arguments))

    def close(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.stop.set)
            self.lifetime.result(20)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
