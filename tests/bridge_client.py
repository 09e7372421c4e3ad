"""A bridge's side of /v1/stream over a real TCP socket (the `websockets` client), and the
agent HTTP calls the stream tests need, against a broker started by `tests.server`.

Not a test module; it does not import pytest or Django. Every read has a timeout, so a
frame that never comes fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from lobbies.wire.frames import (
    EVENT_VERSION,
    EVENT_VERSION_HEADER,
    GENERATION_HEADER,
    RUNTIME_HEADER,
)

FRAME_TIMEOUT = 5.0

Frame = dict[str, Any]


def new_runtime() -> str:
    return str(uuid.uuid4())


def stream_url(broker_url: str) -> str:
    return "ws" + broker_url.removeprefix("http") + "/v1/stream"


def headline(notice: Frame) -> str:
    return str(notice["content"]).split("\n", 1)[0]


def payload(notice: Frame) -> dict[str, Any]:
    """The JSON that follows a notice's headline line."""
    return json.loads(str(notice["content"]).split("\n", 1)[1])


class StreamClosed(AssertionError):
    """The server closed the socket while a frame was expected."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"the stream closed with code {code} ({reason!r})")
        self.code = code
        self.reason = reason


class Bridge:
    """One bridge process's socket: send frames, read frames, each read with a timeout."""

    def __init__(self, connection: ClientConnection, runtime: str) -> None:
        self.connection = connection
        self.runtime = runtime

    @classmethod
    async def connect(
        cls,
        broker_url: str,
        token: str,
        runtime: str | None = None,
        *,
        generation: int | str | None = None,
        version: str | None = str(EVENT_VERSION),
        extra_headers: dict[str, str] | None = None,
    ) -> Bridge:
        runtime = runtime or new_runtime()
        headers = {"Authorization": f"Bearer {token}", RUNTIME_HEADER: runtime}
        if version is not None:
            headers[EVENT_VERSION_HEADER] = version
        if generation is not None:
            headers[GENERATION_HEADER] = str(generation)
        headers.update(extra_headers or {})
        connection = await connect(
            stream_url(broker_url),
            additional_headers=headers,
            proxy=None,
            compression=None,
            open_timeout=FRAME_TIMEOUT,
            close_timeout=2,
            max_size=None,
        )
        return cls(connection, runtime)

    # ------------------------------------------------------------ reading

    async def frame(self, timeout: float = FRAME_TIMEOUT) -> Frame:
        try:
            raw = await asyncio.wait_for(self.connection.recv(), timeout)
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            reason = closed.rcvd.reason if closed.rcvd else ""
            raise StreamClosed(code, reason) from None
        except TimeoutError:
            raise AssertionError(f"no frame within {timeout}s") from None
        frame = json.loads(raw)
        assert isinstance(frame, dict), frame
        return frame

    async def notice(self, kind: str, timeout: float = FRAME_TIMEOUT) -> Frame:
        frame = await self.frame(timeout)
        assert frame["type"] == "notice" and frame["notice_kind"] == kind, frame
        return frame

    async def welcome(self, *, bootstrap: bool, timeout: float = FRAME_TIMEOUT) -> Frame:
        frame = await self.frame(timeout)
        assert frame["type"] == "welcome" and frame["bootstrap"] is bootstrap, frame
        return frame

    async def bootstrapped(self) -> tuple[Frame, Frame]:
        """A newly started process: the welcome, then the bootstrap notice."""
        welcome = await self.welcome(bootstrap=True)
        return welcome, await self.notice("bootstrap")

    async def nothing(self, timeout: float = 0.5) -> None:
        """No frame arrives within `timeout` seconds (and the socket stays open)."""
        try:
            raw = await asyncio.wait_for(self.connection.recv(), timeout)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected frame: {raw!r}")

    async def refused(self, timeout: float = FRAME_TIMEOUT) -> tuple[Frame, int | None]:
        """The error frame of a refusal and the close code that follows it."""
        error = await self.frame(timeout)
        assert error["type"] == "error", error
        try:
            extra = await asyncio.wait_for(self.connection.recv(), timeout)
        except ConnectionClosed as closed:
            return error, closed.rcvd.code if closed.rcvd else None
        raise AssertionError(f"a frame after the refusal instead of a close: {extra!r}")

    # ------------------------------------------------------------ writing

    async def send(self, frame: Frame | str | bytes) -> None:
        data = json.dumps(frame) if isinstance(frame, dict) else frame
        await self.connection.send(data)

    async def roundtrip(self) -> None:
        """A heartbeat answered: every frame sent before it has been handled by the server."""
        await self.send({"type": "heartbeat"})
        answer = await self.frame()
        assert answer == {"type": "heartbeat"}, answer

    async def report(self, notice: Frame, *facts: str) -> None:
        """Tell the broker `received` and/or `host_written` for a notice; wait until handled."""
        for fact in facts:
            await self.send({"type": fact, "notice_id": notice["notice_id"]})
        await self.roundtrip()

    async def close(self) -> None:
        await self.connection.close()

    async def __aenter__(self) -> Bridge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------- agent HTTP calls


async def api(
    broker_url: str, token: str, method: str, path: str, body: Frame | None = None
) -> Frame:
    """One agent API call that must succeed (HTTP 200); its JSON answer."""
    async with httpx.AsyncClient(
        base_url=broker_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        trust_env=False,
    ) as client:
        response = await client.request(method, path, json=body)
    assert response.status_code == 200, (method, path, response.status_code, response.text)
    return response.json()


async def send_message(
    broker_url: str, token: str, to: str, content: str, request_id: str, **options: Any
) -> int:
    """POST /v1/messages; the stored message's id."""
    answer = await api(
        broker_url,
        token,
        "POST",
        "/v1/messages",
        {"to": to, "content": content, "client_request_id": request_id, **options},
    )
    assert answer["status"] == "stored" and answer["duplicate"] is False, answer
    return int(answer["message_id"])


async def acknowledge(broker_url: str, token: str, message_ids: list[int]) -> Frame:
    answer = await api(
        broker_url, token, "POST", "/v1/messages/acknowledge", {"message_ids": message_ids}
    )
    assert answer["acknowledged"] == message_ids, answer
    return answer
