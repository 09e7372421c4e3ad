"""Middleware of our own, each usable in Django's async mode."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.db import InterfaceError, OperationalError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    QueryDict,
    StreamingHttpResponse,
)
from whitenoise.middleware import WhiteNoiseMiddleware

from console.clients import note_forwarded_for
from console.web import PageRefusal, refusal_response
from lobbies.access.clients import forwarded_headers, from_trusted_proxy
from lobbies.access.hosts import HostRefused, hosted, public_host, public_origin, site_for
from lobbies.api.http import (
    READS,
    WRITE_CHECKS,
    error_response,
    refuse_write_if_unheld,
    store_failed,
    text_refusal,
)
from lobbies.errors import BrokerError, ErrorCode, nul_refused
from lobbies.wire.jsontext import NUL, load_json, may_hold_nul, nul_at

log = logging.getLogger("pocolobby.pages")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def loopback_peer(address: str) -> bool:
    """A peer on this machine: what a local broker's pages answer, whatever Host says."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class StaticFilesMiddleware:
    """WhiteNoise's file table and responses, in a middleware that is also async-capable.

    WhiteNoise's own middleware is sync-only, and one sync-only middleware puts every request
    of the process through Django's single sync thread: the API's concurrent sends queued
    there. Serving a static file is a dict lookup and an open, fine on the event loop.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.files = WhiteNoiseMiddleware(get_response)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _static(self, request: HttpRequest) -> HttpResponseBase | None:
        files = self.files
        found = (
            files.find_file(request.path_info)
            if files.autorefresh
            else files.files.get(request.path_info)
        )
        return None if found is None else files.serve(found, request)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        return self._static(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        response = self._static(request)
        if response is None:
            return await self.get_response(request)
        return _as_async_stream(response)


def _as_async_stream(response: HttpResponseBase) -> HttpResponseBase:
    """WhiteNoise streams a file through a sync iterator, which Django under ASGI warns about
    on every request; our static files are small, so the same chunks come from an async one."""
    if isinstance(response, StreamingHttpResponse) and not response.is_async:
        chunks = response.streaming_content

        async def stream() -> AsyncIterator[bytes]:
            # not is_async, so the content is a sync iterator; the stubs type it as either
            for chunk in chunks:  # type: ignore[union-attr]
                yield chunk

        response.streaming_content = stream()
    return response


def oversized_page_post(request: HttpRequest) -> HttpResponse | None:
    """413 for a page body over DATA_UPLOAD_MAX_MEMORY_SIZE, or a form over its field count.

    Django refuses these only where the body is first read (a view, or the CSRF check), as a
    400 with the traceback logged; here it is one log line and a plain page. /v1 answers its
    own 413 in JSON (lobbies/api/http.py).
    """
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return None
    try:
        request.body  # noqa: B018  # reading it is the check (Content-Length and bytes held)
        if request.content_type in FORM_TYPES:
            request.POST  # noqa: B018  # and a form's field and file counts
    except (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent) as refused:
        log.warning("refused %s %s: %s", request.method, request.path, refused)
        return HttpResponse(
            f"this form is larger than this broker takes (at most "
            f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes and "
            f"{settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields); nothing of it was kept\n",
            status=413,
            content_type="text/plain; charset=utf-8",
        )
    return None


def _refused(status: int, message: str) -> HttpResponse:
    return HttpResponse(f"{message}\n", status=status, content_type="text/plain; charset=utf-8")


def local_page_refusal(request: HttpRequest, host: str) -> HttpResponse | None:
    """Who may reach a local broker's pages: a peer on this machine at a loopback Host, and,
    with a public origin, the trusted proxy at the public Host with X-Forwarded-Proto https.

    Forwarded headers from any other peer are refused, not ignored: they mean a client is
    claiming to be the proxy, or the proxy is not the configured one. A request for the
    public Host that did not come through the proxy (straight to the broker's port) is
    refused too, so the public name is only ever served as https.
    """
    peer = request.META.get("REMOTE_ADDR", "")
    if not public_host():
        if not loopback_peer(peer):
            # `serve --host 0.0.0.0` shares the API; the local pages stay on this machine.
            return _refused(403, "pages on this broker answer only on this machine")
        return None
    through_proxy = from_trusted_proxy(request)
    forwarded = forwarded_headers(request)
    if forwarded and not through_proxy:
        return _refused(
            403,
            f"{', '.join(forwarded)} came from {peer or 'an unknown peer'}, which is not this "
            "broker's proxy (POCOLOBBY_TRUSTED_PROXIES); nothing was done",
        )
    if host.lower() == public_host():
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[-1].strip().lower()
        if not through_proxy or proto != "https":
            return _refused(
                403,
                f"{public_origin()} is served only through its https proxy; this request "
                "came around it",
            )
        named = request.headers.get("X-Forwarded-Host", "").split(",")[-1].strip().lower()
        if named and named != public_host():
            return _refused(400, f"X-Forwarded-Host names {named!r}, not {public_host()!r}")
        return None
    if forwarded:
        return _refused(
            400,
            f"the proxy passed Host {host!r}; it must pass the public name's Host "
            f"({public_host()}) unchanged (docs/OPERATIONS.md, the phone recipe)",
        )
    if not loopback_peer(peer):
        return _refused(403, "pages on this broker answer only on this machine")
    return None


class HostRouting:
    """Send each request to its place's URLs (lobbies/access/hosts.py) or refuse a foreign Host,
    and a page POST too large to read (`oversized_page_post`).

    A local lobby's pages keep the paths they have on a lobby host: `/team/settings` is
    resolved as `/settings` with `request.site.base == "/team"`.
    """

    sync_capable = True
    async_capable = True

    URLCONFS: dict[str, str] = {
        "api": "pocolobby.urls_api",
        "account": "console.urls",
        "lobby": "board.urls",
    }

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _route(self, request: HttpRequest) -> HttpResponseBase | None:
        try:
            host = request.get_host()
        except DisallowedHost:
            # Django would answer the same 400 but log a traceback for what a client typed.
            host = "<not allowed>"
        try:
            site = site_for(host, request.path_info)
        except HostRefused as refused:
            return HttpResponse(
                f"{refused}\n", status=400, content_type="text/plain; charset=utf-8"
            )
        if site.place != "api" and not hosted():
            refused_peer = local_page_refusal(request, host)
            if refused_peer is not None:
                return refused_peer
        if site.place != "api":
            refused_body = oversized_page_post(request)
            if refused_body is not None:
                return refused_body
        if hosted():
            note_forwarded_for(request)
        # django-stubs types request.site as django.contrib.sites' Site; ours is
        # lobbies.access.hosts'.
        request.site = site  # type: ignore[assignment]
        request.urlconf = self.URLCONFS[site.place]
        if site.base:
            request.path_info = request.path_info[len(site.base) :] or "/"
        return None

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        return self._route(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        refused = self._route(request)
        return refused if refused is not None else await self.get_response(request)


class RefuseNul:
    """400 for a NUL character (U+0000) in a request's path, query string, or form or JSON
    body, before any view reads it: PostgreSQL's text cannot hold one (a 500 there) and
    SQLite would store it, so neither store is handed one. The fast lane (pocolobby.asgi)
    checks /v1 paths the same way, and lobbies.api.http.json_body every /v1 body.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def _refused(self, request: HttpRequest) -> HttpResponseBase | None:
        refusal = text_refusal(request.path, request.META.get("QUERY_STRING", ""))
        api = request.path.startswith("/v1/")
        if refusal is None and not api:  # a /v1 body is checked where it is parsed (json_body)
            refusal = _body_refusal(request)
        if refusal is None:
            return None
        if api:
            return error_response(refusal)
        return refusal_response(request, PageRefusal(400, refusal.message, ErrorCode.INVALID_TEXT))

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        return self._refused(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        refused = self._refused(request)
        return refused if refused is not None else await self.get_response(request)


def _body_refusal(request: HttpRequest) -> BrokerError | None:
    """A form or JSON body holding a NUL, naming the field; other bodies (files) are bytes."""
    form = request.content_type == "application/x-www-form-urlencoded"
    if not form and request.content_type != "application/json":
        return None
    try:
        body = request.body
    except RequestDataTooBig:
        return None  # refused as too large where the body is read
    if form:
        if b"%00" not in body and b"\x00" not in body:
            return None
        fields = QueryDict(body, encoding=request.encoding)
        for name, values in fields.lists():
            if NUL in name or any(NUL in value for value in values):
                return _field(name)
        return None
    if not may_hold_nul(body):
        return None
    try:
        found = nul_at(load_json(body, what="the form"))
    except ValueError:
        return None  # not JSON: the view refuses it as such
    return None if found is None else _field(found)


def _field(name: str) -> BrokerError:
    return nul_refused(f"the field {name.replace(NUL, '')[:40]!r}" if name else "a field's name")


class StoreFailures:
    """A view the database failed under (its connection lost, or one refused) answers `503
    store_unavailable` (JSON on /v1, a line of text on a page), never a 500 with a
    traceback: it is retryable, and Django's close_old_connections at the request's end
    closes the broken connection, so the next request connects afresh."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, *args: object) -> HttpResponse | None:
        """A page's write, while the store's lock is not held (lobbies.api.http.WRITE_CHECKS)."""
        if not WRITE_CHECKS or request.method in READS:
            return None
        try:
            refuse_write_if_unheld()
        except BrokerError as refusal:
            if request.path.startswith("/v1/"):
                return error_response(refusal)
            return _unavailable()
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        answer = store_failed(request, exception)
        if request.path.startswith("/v1/"):
            return answer
        return _unavailable()


def _unavailable() -> HttpResponse:
    response = HttpResponse(
        "the store did not answer (its connection was lost); try again in a moment\n",
        status=503,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = "1"
    return response
