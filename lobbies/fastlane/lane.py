"""The /v1 fast lane beside Django's handler: agent API requests served straight from their
resolved `ApiView` on a worker thread, and on the embedded store queued requests share one commit.

The agent API answers JSON to native clients: it needs no sessions, CSRF, messages or CSP,
and Django's ASGI handler costs a thread per request on top. `AgentAPI` therefore serves
/v1 (its views are `ApiView`s, whose `serve_sync` is the whole view) on a worker thread
straight from the resolved view, after the same Host check; everything else goes through
Django as usual. It builds Django's `ASGIRequest` itself (lobbies/fastlane/README.md).
"""

from __future__ import annotations

import functools
import io
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import DEFAULT_DB_ALIAS, DatabaseError, transaction
from django.http import HttpResponse
from django.urls import Resolver404, get_urlconf, resolve

from lobbies.access.hosts import HostRefused, site_for
from lobbies.api import uploads
from lobbies.api.http import (
    READS,
    ApiView,
    JsonAnswer,
    error_response,
    in_worker_thread,
    text_refusal,
)
from lobbies.errors import BrokerError, ErrorCode, bad_request, request_too_large
from lobbies.fastlane import store
from lobbies.fastlane.sqlite.base import (
    SharedCommitAbandoned,
    merging_savepoints,
    optimistic_commit,
)
from lobbies.push.consumers import Batches
from lobbies.wire.media import ATTACHMENT_ROUTE

log = logging.getLogger("pocolobby.api")


def _serve_api(request: ASGIRequest) -> HttpResponse | None:
    try:
        site = site_for(request.get_host(), request.path_info)
    except DisallowedHost:
        return JsonAnswer(
            {
                "error": {
                    "code": ErrorCode.BAD_REQUEST,
                    "message": "the request was refused (check Host)",
                }
            },
            status=400,
        )
    except HostRefused:
        return None
    if site.place != "api":
        return None  # Django answers: a lobby host or the account area serves no API
    route = _api_route(request.path_info, get_urlconf())
    if route is None:
        return None
    view, args, kwargs = route
    return view.serve_sync(request, *args, **kwargs)


@functools.lru_cache(maxsize=1024)
def _api_route(
    path: str, urlconf: str | None
) -> tuple[ApiView, tuple[Any, ...], dict[str, Any]] | None:
    """The /v1 view a path resolves to, with its arguments (None: Django serves it),
    remembered: resolving walked the URL patterns on every request (docs/PERFORMANCE.md,
    "Figures from code comments")."""
    try:
        match = resolve(path, urlconf)
    except Resolver404:
        return None
    if not isinstance(match.func, ApiView):
        return None
    return match.func, match.args, match.kwargs


# At most this many requests share a commit, so none waits long for the others' work.
REQUESTS_PER_COMMIT = 16


def _serve_together(requests: list[ASGIRequest]) -> list[HttpResponse | Exception | None]:
    """/v1 requests that queued together for the embedded store, served in one write
    transaction: one commit and one fsync answer them all (group commit).

    On SQLite every database call of the process runs on one thread, so requests arriving
    together waited for each other anyway; each then paid its own commit, and its own copy
    of the pages the others also wrote (the lobby's row, the indexes' last leaves). Together,
    each costs the database thread less (docs/PERFORMANCE.md, "Group commit"). A failure stays
    its own: a
    request that answers 5xx or raises, or whose atomic block fails, has its writes rolled
    back and the others' kept. None is answered before the commit, so `stored` still means
    stored. If the commit itself fails, every request of the batch is answered 503 and
    nothing of it was kept.

    First optimistically, with no savepoints (nearly every batch); if a request fails,
    that transaction is rolled back and the batch served again, each request in a savepoint.
    A view may run twice: as when the database aborts it (lobbies.api.http.run_retrying), its
    only effects are its writes and what it publishes on commit.
    """
    if len(requests) == 1 or all(r.method in READS for r in requests):
        # Alone, or only reads: served as they were, no write transaction to share (a
        # health check still reads without waiting for another process's writer).
        return [_serve_alone(request) for request in requests]
    try:
        try:
            return _serve_optimistically(requests)
        except SharedCommitAbandoned:
            return _serve_in_savepoints(requests)
    except DatabaseError:
        log.exception("a commit of %d requests failed; none of them was stored", len(requests))
        return [_not_stored() for _ in requests]


def _serve_optimistically(requests: list[ASGIRequest]) -> list[HttpResponse | Exception | None]:
    answers: list[HttpResponse | Exception | None] = []
    with transaction.atomic(), optimistic_commit(DEFAULT_DB_ALIAS):
        for request in requests:
            try:
                response = _serve_api(request)
            except Exception as error:
                raise SharedCommitAbandoned from error
            if response is not None and response.status_code >= 500:
                raise SharedCommitAbandoned
            answers.append(response)
    return answers


def _serve_in_savepoints(requests: list[ASGIRequest]) -> list[HttpResponse | Exception | None]:
    answers: list[HttpResponse | Exception | None] = []
    # A send's own savepoint, opened first thing in its request's, merges into it.
    with transaction.atomic(), merging_savepoints(DEFAULT_DB_ALIAS):
        for request in requests:
            try:
                with transaction.atomic():
                    response = _serve_api(request)
                    if response is not None and response.status_code >= 500:
                        transaction.set_rollback(True)
                answers.append(response)
            except Exception as error:
                answers.append(error)
    return answers


def _serve_alone(request: ASGIRequest) -> HttpResponse | Exception | None:
    try:
        return _serve_api(request)
    except Exception as error:
        return error


def _not_stored() -> HttpResponse:
    return error_response(
        BrokerError(
            503,
            ErrorCode.STORE_UNAVAILABLE,
            "the store could not commit this request; nothing of it was kept: retry it",
        )
    )


REQUESTS = Batches(_serve_together, most=REQUESTS_PER_COMMIT)
# POCOLOBBY_SHARED_COMMIT=0: each /v1 request commits alone (benchmarks/shared_commit.py).
SHARED_COMMIT = settings.SHARED_COMMIT


class AgentAPI:
    def __init__(self, django: Any) -> None:
        self.django = django

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.django(scope, receive, send)
            return
        refused = text_refusal(scope["path"], scope.get("query_string", b"").decode("latin-1"))
        if refused is not None:
            await _send_response(send, error_response(refused))
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
        """An attachment upload: its token checked and its declared length reserved in the
        agent's and its lobby's shares of the upload budget before any of its body is read
        (lobbies/api/uploads.py), released when it is answered."""
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        try:
            size = uploads.declared_length(headers)
            check = in_worker_thread(uploads.uploader)
            who = await sync_to_async(check, thread_sensitive=False)(headers)
            uploads.budget.reserve(size, who)
        except BrokerError as error:
            await _send_response(send, error_response(error))
            return
        except DatabaseError:
            log.exception("an upload's token could not be checked")
            await _send_response(send, _not_stored())
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
                                code=ErrorCode.ATTACHMENT_LENGTH_MISMATCH,
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
                    code=ErrorCode.ATTACHMENT_LENGTH_MISMATCH,
                )
                await _send_response(send, error_response(short))
                return
            await self._serve(scope, receive, send, bytes(body), together=False)
        finally:
            uploads.budget.release(size, who)

    async def _serve(
        self, scope: dict[str, Any], receive: Any, send: Any, body: bytes, *, together: bool = True
    ) -> None:
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                message: dict[str, Any] = await receive()
                return message
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        request = ASGIRequest(scope, io.BytesIO(body))
        response: HttpResponse | None
        if together and SHARED_COMMIT and store.embedded():
            # An upload (together=False) hashes and writes a file: it keeps its own commit.
            response = await REQUESTS(request)
        else:
            serve = in_worker_thread(_serve_api)
            response = await sync_to_async(serve, thread_sensitive=False)(request)
        if response is None:
            await self.django(scope, replay, send)
            return
        await _send_response(send, response)


async def _send_response(send: Any, response: HttpResponse) -> None:
    body = response.content
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
    if not response.has_header("Content-Length"):
        # Its length, not chunked framing: the answer is whole before it is sent.
        headers.append((b"content-length", str(len(body)).encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
