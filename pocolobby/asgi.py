"""HTTP through Django; the bridges' WebSocket stream at /v1/stream; an API fast lane.

The agent API answers JSON to native clients: it needs no sessions, CSRF, messages or CSP,
and Django's ASGI handler costs a thread per request on top. `AgentAPI` therefore serves
/v1 (its views are `ApiView`s, whose `serve_sync` is the whole view) on a worker thread
straight from the resolved view, after the same Host check; everything else goes through
Django as usual.
"""

from __future__ import annotations

import io
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
django_application = get_asgi_application()

from asgiref.sync import sync_to_async  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.exceptions import DisallowedHost  # noqa: E402
from django.core.handlers.asgi import ASGIRequest  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import Resolver404, resolve  # noqa: E402
from django.urls import path as route  # noqa: E402

from lobbies import uploads  # noqa: E402
from lobbies.consumers import BridgeConsumer  # noqa: E402
from lobbies.errors import BrokerError, bad_request, request_too_large  # noqa: E402
from lobbies.hosts import HostRefused, site_for  # noqa: E402
from lobbies.http import ApiView, JsonAnswer, error_response, in_worker_thread  # noqa: E402
from lobbies.wire import ATTACHMENT_ROUTE  # noqa: E402


def _serve_api(request: ASGIRequest) -> HttpResponse | None:
    try:
        site = site_for(request.get_host(), request.path_info)
    except DisallowedHost:
        return JsonAnswer(
            {"error": {"code": "bad_request", "message": "the request was refused (check Host)"}},
            status=400,
        )
    except HostRefused:
        return None
    if site.place != "api":
        return None  # Django answers: a lobby host or the account area serves no API
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return None
    if not isinstance(match.func, ApiView):
        return None
    return match.func.serve_sync(request, *match.args, **match.kwargs)


class AgentAPI:
    def __init__(self, django: Any) -> None:
        self.django = django

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.django(scope, receive, send)
            return
        if scope["method"] == "PUT" and scope["path"].startswith(ATTACHMENT_ROUTE):
            await self._upload(scope, receive, send)
            return
        body, limit = bytearray(), settings.BOUNDS.request_bytes
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                # Answered here: Django could not be handed a body read only in part.
                await _send_response(send, error_response(request_too_large(limit)))
                return
            if not message.get("more_body"):
                break
        await self._serve(scope, receive, send, bytes(body))

    async def _upload(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """An attachment upload: its declared length reserved in the process-wide budget
        before any of its body is read (lobbies/uploads.py), released when it is answered."""
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        try:
            size = uploads.declared_length(headers)
            uploads.budget.reserve(size)
        except BrokerError as error:
            await _send_response(send, error_response(error))
            return
        try:
            body = bytearray()
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # a truncated upload: nothing was stored
                body += message.get("body", b"")
                if len(body) > size:
                    await _send_response(
                        send,
                        error_response(
                            bad_request(
                                f"the body is longer than its Content-Length of {size}",
                                code="attachment_length_mismatch",
                            )
                        ),
                    )
                    return
                if not message.get("more_body"):
                    break
            if len(body) != size:
                short = bad_request(
                    f"the body has {len(body)} bytes, not its Content-Length of {size}; "
                    "nothing was kept",
                    code="attachment_length_mismatch",
                )
                await _send_response(send, error_response(short))
                return
            await self._serve(scope, receive, send, bytes(body))
        finally:
            uploads.budget.release(size)

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any, body: bytes) -> None:
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                message: dict[str, Any] = await receive()
                return message
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        request = ASGIRequest(scope, io.BytesIO(body))
        serve = in_worker_thread(_serve_api)
        response = await sync_to_async(serve, thread_sensitive=False)(request)
        if response is None:
            await self.django(scope, replay, send)
            return
        await _send_response(send, response)


async def _send_response(send: Any, response: HttpResponse) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


application = ProtocolTypeRouter(
    {
        "http": AgentAPI(django_application),
        "websocket": URLRouter([route("v1/stream", BridgeConsumer.as_asgi())]),
    }
)
