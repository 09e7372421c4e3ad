"""What every /v1 view shares: JSON in and out, errors as JSON, no cookies, no Origin."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import close_old_connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from lobbies.errors import BrokerError, bad_request
from lobbies.schemas import check_depth

log = logging.getLogger("pocolobby.api")

View = Callable[..., JsonResponse]


def error_response(error: BrokerError) -> JsonResponse:
    response = JsonResponse(error.as_json(), status=error.status)
    retry_after = error.extra.get("retry_after")
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def bearer_token(request: HttpRequest) -> str:
    header = request.headers.get("Authorization", "")
    if not header:
        raise BrokerError(401, "missing_token", "send Authorization: Bearer <token>")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise BrokerError(401, "invalid_token", "Authorization must be 'Bearer <token>'")
    return token.strip()


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request body as a JSON object, refusing oversized, malformed or non-object bodies."""
    limit = settings.BOUNDS.request_bytes
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise BrokerError(413, "request_too_large", f"the body is over {limit} bytes")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise BrokerError(413, "request_too_large", f"the body is over {limit} bytes") from None
    if len(raw) > limit:
        raise BrokerError(413, "request_too_large", f"the body is over {limit} bytes")
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise bad_request("the body is not UTF-8 text", code="invalid_json") from None
    except (ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else "nested too deeply"
        raise bad_request(f"the body is not valid JSON: {reason}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("the body must be a JSON object of arguments", code="invalid_json")
    for name, value in data.items():
        try:
            check_depth(value, f"argument {name[:40]!r}")
        except ValueError as error:
            raise bad_request(str(error), code="invalid_json") from None
    return data


def in_worker_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run `fn` as Django runs a request on its own thread: stale connections closed around it."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run


def api_view(methods: tuple[str, ...]) -> Callable[[View], Any]:
    """Wrap a /v1 view: method check, Origin refusal, BrokerError -> JSON, never a traceback.

    The view is served async and its body runs on the loop's default executor, so requests
    do not queue behind the one thread Django gives sync views (and pages) under ASGI. On
    PostgreSQL that executor is a pool; on SQLite `pocolobby serve` gives it one thread of
    its own (pocolobby/server.py). (`POCOLOBBY_API_THREADS=0`, set by the in-process tests,
    keeps them on the caller's thread and its test transaction.)
    """

    def decorate(view: View) -> Any:
        def run(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            try:
                if request.method not in methods:
                    raise BrokerError(
                        405, "method_not_allowed", f"use {' or '.join(methods)} on {request.path}"
                    )
                if "Origin" in request.headers:
                    raise BrokerError(
                        403, "origin_refused", "the API serves native clients, not browser pages"
                    )
                return view(request, *args, **kwargs)
            except BrokerError as error:
                return error_response(error)
            except Exception:
                log.exception("internal error on %s %s", request.method, request.path)
                return JsonResponse(
                    {"error": {"code": "internal_error", "message": "the broker failed; retry"}},
                    status=500,
                )

        @csrf_exempt
        @functools.wraps(view)
        async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            if not settings.API_THREADS:
                return await sync_to_async(run)(request, *args, **kwargs)
            worker = in_worker_thread(run)
            return await sync_to_async(worker, thread_sensitive=False)(request, *args, **kwargs)

        wrapped.serve_sync = run  # type: ignore[attr-defined]  # for pocolobby.asgi's fast lane
        return wrapped

    return decorate
