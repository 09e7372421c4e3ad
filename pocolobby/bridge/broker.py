"""Commands to the broker over HTTP, and what a failure means for the caller.

Every call carries the agent token and, once the stream has issued a generation, the runtime
headers that fence this process's writes. The bridge never retries a mutation by itself: a
network failure is reported as "not sent" (the request never left) or "unknown" (it may have
been applied), and the model retries with the same client_request_id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

import httpx

from lobbies.wire.errors import ErrorCode
from lobbies.wire.frames import GENERATION_HEADER, RUNTIME_HEADER
from lobbies.wire.jsontext import JSONObject
from lobbies.wire.media import ATTACHMENT_NAME_HEADER, ATTACHMENT_ROUTE, ATTACHMENT_SHA256_HEADER
from pocolobby.bridge import bridge_version

REQUEST_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
# An attachment of up to 10 MiB over a slow link.
UPLOAD_TIMEOUT = httpx.Timeout(120.0, connect=10.0)


# Failures where the request provably never reached the broker.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


@dataclass
class Outcome:
    """One broker call: an answer (`data`), a refusal (`status`, `code`), or a network failure."""

    data: JSONObject | None = None
    status: int | None = None
    code: str | None = None
    message: str | None = None
    error: JSONObject = field(default_factory=dict)
    # "not_sent" or "unknown" when the network failed; None when the broker answered.
    transport: str | None = None

    @property
    def ok(self) -> bool:
        return self.data is not None


@dataclass(frozen=True)
class Download:
    """An attachment's bytes as the broker served them, with its stated name, type and hash."""

    data: bytes
    media_type: str
    name: str
    sha256: str


class BrokerClient:
    """An httpx client for one agent; `generation` is set by the stream once it is known."""

    def __init__(self, url: str, token: str, runtime_id: str) -> None:
        self.url = url
        self.runtime_id = runtime_id
        self.generation: int | None = None
        self._http = httpx.AsyncClient(
            base_url=url,
            timeout=REQUEST_TIMEOUT,
            headers={
                "Authorization": f"Bearer {token}",
                "User-Agent": f"pocolobby-bridge/{bridge_version()}",
            },
        )

    def runtime_headers(self) -> dict[str, str]:
        """Both runtime headers or neither: the broker refuses one without the other."""
        if self.generation is None:
            return {}
        return {
            RUNTIME_HEADER: self.runtime_id,
            GENERATION_HEADER: str(self.generation),
        }

    async def request(self, method: str, path: str, body: JSONObject | None = None) -> Outcome:
        try:
            response = await self._http.request(
                method,
                path,
                content=None if body is None else json.dumps(body, ensure_ascii=False).encode(),
                headers={"Content-Type": "application/json", **self.runtime_headers()},
            )
        except _NOT_SENT as exc:
            return Outcome(transport="not_sent", message=_describe(exc))
        except httpx.HTTPError as exc:
            return Outcome(transport="unknown", message=_describe(exc))
        return _outcome(response)

    async def catalog(self) -> Outcome:
        return await self.request("GET", "/v1/tools")

    async def call(self, name: str, arguments: JSONObject) -> Outcome:
        return await self.request("POST", f"/v1/tools/{quote(name, safe='')}", arguments)

    async def upload(self, sha256: str, media_type: str, data: bytes) -> Outcome:
        """`PUT /v1/attachments/<sha256>` with the raw bytes: proves this agent holds them."""
        try:
            response = await self._http.put(
                f"{ATTACHMENT_ROUTE}{sha256}",
                content=data,
                headers={"Content-Type": media_type, **self.runtime_headers()},
                timeout=UPLOAD_TIMEOUT,
            )
        except _NOT_SENT as exc:
            return Outcome(transport="not_sent", message=_describe(exc))
        except httpx.HTTPError as exc:
            return Outcome(transport="unknown", message=_describe(exc))
        return _outcome(response)

    async def download(self, attachment_id: int, limit: int) -> Download | Outcome:
        """`GET /v1/attachments/<id>`: the bytes and what the broker says they are; a
        refusal or a network failure as an Outcome. More than `limit` bytes is refused."""
        try:
            async with self._http.stream(
                "GET",
                f"{ATTACHMENT_ROUTE}{int(attachment_id)}",
                headers=self.runtime_headers(),
                timeout=UPLOAD_TIMEOUT,
            ) as response:
                if not response.is_success:
                    await response.aread()
                    return _outcome(response)
                chunks: list[bytes] = []
                total = 0
                async for chunk in response.aiter_bytes():
                    total += len(chunk)
                    if total > limit:
                        return Outcome(
                            status=response.status_code,
                            code=ErrorCode.ATTACHMENT_TOO_LARGE,
                            message=f"the broker sent more than {limit} bytes",
                        )
                    chunks.append(chunk)
                headers = response.headers
                return Download(
                    data=b"".join(chunks),
                    media_type=headers.get("Content-Type", "application/octet-stream"),
                    name=unquote(headers.get(ATTACHMENT_NAME_HEADER, "")),
                    sha256=headers.get(ATTACHMENT_SHA256_HEADER, "").lower(),
                )
        except _NOT_SENT as exc:
            return Outcome(transport="not_sent", message=_describe(exc))
        except httpx.HTTPError as exc:
            return Outcome(transport="unknown", message=_describe(exc))

    async def aclose(self) -> None:
        await self._http.aclose()


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _outcome(response: httpx.Response) -> Outcome:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.is_success:
        if isinstance(payload, dict):
            return Outcome(data=payload, status=response.status_code)
        return Outcome(
            status=response.status_code,
            code="invalid_answer",
            message=f"the broker answered {response.status_code} without a JSON object",
        )
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        error = {}
    return Outcome(
        status=response.status_code,
        code=str(error.get("code") or f"http_{response.status_code}"),
        message=str(error.get("message") or response.reason_phrase or "refused"),
        error=error,
    )
