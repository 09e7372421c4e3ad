"""What every /v1 view shares: JSON in and out, errors as JSON, no cookies, no Origin."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar
from urllib.parse import parse_qsl

import orjson
from asgiref.sync import markcoroutinefunction, sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.serializers.json import DjangoJSONEncoder
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.http import HttpRequest, HttpResponse
from pydantic import BaseModel

from lobbies.access import credentials
from lobbies.api.answers import AnswerShape
from lobbies.api.schemas import check_depth
from lobbies.errors import (
    BrokerError,
    ErrorCode,
    bad_request,
    method_not_allowed,
    nul_refused,
    request_too_large,
    store_unavailable,
)
from lobbies.wire.jsontext import (
    MAX_JSON_DEPTH,
    NUL,
    PARSE_DEPTH,
    JSONObject,
    JsonTooDeep,
    JSONValue,
    check_json_nesting,
    may_hold_nul,
    nul_at,
)

log = logging.getLogger("pocolobby.api")


class JsonAnswer(HttpResponse):
    """A /v1 answer: a JSON object as compact UTF-8, encoded by orjson.

    The standard encoder was a large share of the broker's CPU serving a page of 200 messages
    (docs/PERFORMANCE.md, "Figures from code comments"). Datetimes
    pass to Django's encoder, so times read as they always have; whatever orjson refuses (an
    integer past 64 bits in a checkpoint, which JSON allows) is encoded by the standard
    library instead, never answered with a 500.
    """

    def __init__(self, data: Mapping[str, object], status: int = 200) -> None:
        super().__init__(_encoded(data), status=status, content_type="application/json")


_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS
_DJANGO = DjangoJSONEncoder()


def _encoded(data: Mapping[str, object]) -> bytes:
    try:
        return orjson.dumps(data, default=_DJANGO.default, option=_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(data, cls=DjangoJSONEncoder).encode()


# PostgreSQL breaks a lock cycle between transactions by aborting one of them (40P01,
# deadlock_detected; 40001 is a serialization failure). The aborted transaction stored
# nothing, so the request runs again rather than answering 500 (the chaos soak,
# benchmarks/chaos.py, met both under concurrent acknowledgments and sends).
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
DATABASE_ATTEMPTS = 3


# What may refuse a write before it starts, each a reason or None: on PostgreSQL `serve`
# adds its store lock's (pocolobby/store_lock.py, write_refusal), so no write is answered
# while the lock's session is lost. Asked for every /v1 request but GET and HEAD.
WRITE_CHECKS: list[Callable[[], str | None]] = []
READS = frozenset({"GET", "HEAD"})


def _retryable(error: OperationalError) -> bool:
    return (
        getattr(error.__cause__, "sqlstate", None) in RETRYABLE_SQLSTATES
        and not connection.in_atomic_block
    )


def run_retrying(view: Callable[[], HttpResponse]) -> HttpResponse:
    """Run `view`; again (at most DATABASE_ATTEMPTS in all) when the database aborted it."""
    for attempt in range(1, DATABASE_ATTEMPTS + 1):
        try:
            return view()
        except OperationalError as error:
            if attempt == DATABASE_ATTEMPTS or not _retryable(error):
                raise
            code = getattr(error.__cause__, "sqlstate", "")
            log.warning("the database aborted a transaction (SQLSTATE %s); retrying", code)
    raise AssertionError("unreachable")


View = Callable[..., HttpResponse]


@dataclass(frozen=True)
class Documented:
    """One operation of a /v1 view as the OpenAPI document shows it (lobbies/api/openapi.py).

    `body` and `query` are the pydantic models the view parses its arguments with; `answer`
    is the TypedDict of its success answer (None: any JSON object). `bind` fixes path
    parameters to one value each, so one generic route (`tools/<name>`) reads as one path per
    operation.
    `errors` are the error statuses beyond those every operation of its kind can answer.
    """

    method: str
    answer: AnswerShape | None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    statuses: tuple[int, ...] = (200,)
    errors: tuple[int, ...] = ()
    auth: Literal["agent", "admin", "none"] = "agent"
    bind: tuple[tuple[str, str], ...] = ()
    summary: str = ""
    # Answers of their own shape at a status, instead of the error shape (health's 503).
    others: tuple[tuple[int, AnswerShape], ...] = ()
    # A body that is not JSON arguments: its media type (the bytes of a file, say).
    raw_body: str | None = None
    # A success answer that is not JSON: its media type (a file's bytes).
    raw_answer: str | None = None


ViewFunction = TypeVar("ViewFunction", bound=Callable[..., HttpResponse])
Arguments = ParamSpec("Arguments")
Answered = TypeVar("Answered")


def documented(*openapi: Documented) -> Callable[[ViewFunction], ViewFunction]:
    """State the operations of a plain view (not an `api_view`) for the OpenAPI document."""

    def mark(view: ViewFunction) -> ViewFunction:
        setattr(view, "openapi", openapi)  # noqa: B010 (a function's attribute, typed by use)
        return view

    return mark


def error_response(error: BrokerError) -> JsonAnswer:
    response = JsonAnswer(error.as_json(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    retry_after = error.extra.get("retry_after")
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def bearer_token(request: HttpRequest) -> str:
    return credentials.bearer_token(request_header(request, "Authorization") or "")


# Headers Django's META keeps without the HTTP_ prefix (as the CGI variables do).
_UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


def request_header(request: HttpRequest, name: str) -> str | None:
    """One request header, read from META where Django keeps it: `request.headers` parses
    every header of the request on first use, a cost every send paid (docs/PERFORMANCE.md,
    "Figures from code comments")."""
    key = name.upper().replace("-", "_")
    return request.META.get(key if key in _UNPREFIXED else f"HTTP_{key}")


def json_body(request: HttpRequest) -> JSONObject:
    """The request body as a JSON object, refusing oversized, malformed or non-object bodies."""
    limit = settings.BOUNDS.request_bytes
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise request_too_large(limit)
    try:
        raw = request.body
    except RequestDataTooBig:
        raise request_too_large(limit) from None
    if len(raw) > limit:
        raise request_too_large(limit)
    if not raw.strip():
        return {}
    try:
        data = _parsed(raw)
    except UnicodeDecodeError:
        raise bad_request("the body is not UTF-8 text", code=ErrorCode.INVALID_JSON) from None
    except JsonTooDeep as exc:
        raise bad_request(
            f"{exc} (an argument may nest {MAX_JSON_DEPTH})", code=ErrorCode.INVALID_JSON
        ) from None
    except ValueError as exc:
        reason = (str(exc).splitlines() or ["malformed"])[0][:120]
        raise bad_request(
            f"the body is not valid JSON: {reason}", code=ErrorCode.INVALID_JSON
        ) from None
    if not isinstance(data, dict):
        raise bad_request(
            "the body must be a JSON object of arguments", code=ErrorCode.INVALID_JSON
        )
    if may_hold_nul(raw):
        found = nul_at(data)
        if found is not None:
            raise nul_refused(f"argument {found!r}" if found else "an argument's name")
    for name, value in data.items():
        try:
            check_depth(value, f"argument {name[:40]!r}")
        except ValueError as error:
            raise bad_request(str(error), code=ErrorCode.INVALID_JSON) from None
    return data


# Nineteen digits in a row: possibly an integer past 64 bits, which orjson would read as a
# float where the standard parser keeps it exact.
_LONG_RUN = 19
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % _LONG_RUN)
_DIGITS = b"0123456789"


def _may_hold_a_long_number(raw: bytes) -> bool:
    """Whether `raw` may hold a run of 19 digits. Most bodies have fewer digits than that in
    all, counted in C far faster than the pattern searches every body (docs/PERFORMANCE.md,
    "Figures from code comments")."""
    digits = len(raw) - len(raw.translate(None, _DIGITS))
    return digits >= _LONG_RUN and _LONG_NUMBER.search(raw) is not None


def _parsed(raw: bytes) -> JSONValue:
    """JSON text parsed by orjson, faster than the standard parser (docs/PERFORMANCE.md,
    "Figures from code comments"); what orjson
    refuses (NaN, a lone surrogate, an infinite number, UTF-16) and text with a long number
    go to the standard parser, which accepts, or refuses with its own message, exactly what
    it did before. Text nesting past PARSE_DEPTH reaches neither."""
    if raw.count(b"[") + raw.count(b"{") > PARSE_DEPTH:
        check_json_nesting(raw, PARSE_DEPTH, "the body")
    if not _may_hold_a_long_number(raw):
        try:
            quick: JSONValue = orjson.loads(raw)
            return quick
        except orjson.JSONDecodeError:
            pass
    try:
        parsed: JSONValue = json.loads(raw)
        return parsed
    except RecursionError:  # UTF-16 text, say, which the bracket count did not see
        raise JsonTooDeep("the body nests JSON too deeply to be read") from None


def text_refusal(path: str, query: str) -> BrokerError | None:
    """A request whose path or query string holds a NUL, refused before any view reads it:
    `path` as decoded, `query` as sent (percent-encoded)."""
    if NUL in path:
        return nul_refused("the path")
    if "%00" in query or NUL in query:
        for name, value in parse_qsl(query, keep_blank_values=True):
            if NUL in name or NUL in value:
                return nul_refused(f"the query parameter {name.replace(NUL, '')[:40]!r}")
        return nul_refused("the query string")
    return None


def in_worker_thread(fn: Callable[Arguments, Answered]) -> Callable[Arguments, Answered]:
    """Run `fn` as Django runs a request on its own thread: stale connections closed around it."""

    @functools.wraps(fn)
    def run(*args: Arguments.args, **kwargs: Arguments.kwargs) -> Answered:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run


class ApiView:
    """A /v1 view: Django serves it async; pocolobby.asgi's fast lane calls `serve_sync`.

    `serve_sync` is the whole view, run on the caller's thread: method check, Origin
    refusal, BrokerError -> JSON. Called through Django, it runs on the loop's default
    executor, so requests do not queue behind the one thread Django gives sync views (and
    pages) under ASGI. On PostgreSQL that executor is a pool; on SQLite `pocolobby serve`
    gives it one thread of its own (lobbies/fastlane/server.py). (`POCOLOBBY_API_THREADS=0`, set by
    the in-process tests, keeps them on the caller's thread and its test transaction.)
    """

    csrf_exempt = True

    def __init__(
        self,
        serve_sync: View,
        name: str,
        openapi: Sequence[Documented] = (),
        doc: str = "",
        methods: Sequence[str] = (),
    ) -> None:
        self.serve_sync = serve_sync
        self.__name__ = name
        self.__doc__ = doc
        self.openapi = tuple(openapi)
        self.methods = tuple(methods)  # what its method check lets through
        markcoroutinefunction(self)  # Django awaits it rather than running it on its thread

    async def __call__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.API_THREADS:
            return await sync_to_async(self.serve_sync)(request, *args, **kwargs)
        worker = in_worker_thread(self.serve_sync)
        answer: HttpResponse = await sync_to_async(worker, thread_sensitive=False)(
            request, *args, **kwargs
        )
        return answer


def api_view(methods: tuple[str, ...], *openapi: Documented) -> Callable[[View], ApiView]:
    """Wrap a /v1 view: method check, Origin refusal, BrokerError -> JSON, never a traceback.

    `openapi` says how each of its operations reads in the published document; a method
    without one fails the document's generation (lobbies/api/openapi.py).
    """

    def decorate(view: View) -> ApiView:
        def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                if request.method not in methods:
                    raise method_not_allowed(methods, request.path)
                if request_header(request, "Origin") is not None:
                    raise BrokerError(
                        403,
                        ErrorCode.ORIGIN_REFUSED,
                        "the API serves native clients, not browser pages",
                    )
                if WRITE_CHECKS and request.method not in READS:
                    refuse_write_if_unheld()
                return run_retrying(functools.partial(view, request, *args, **kwargs))
            except BrokerError as error:
                return error_response(error)
            except (OperationalError, InterfaceError) as error:
                return store_failed(request, error)
            except Exception:
                log.exception("internal error on %s %s", request.method, request.path)
                return JsonAnswer(
                    {
                        "error": {
                            "code": ErrorCode.INTERNAL_ERROR,
                            "message": "the broker failed; retry",
                        }
                    },
                    status=500,
                )

        return ApiView(run, getattr(view, "__name__", "view"), openapi, view.__doc__ or "", methods)

    return decorate


def refuse_write_if_unheld() -> None:
    """`503 store_unavailable` when a WRITE_CHECKS check refuses writes now."""
    for check in WRITE_CHECKS:
        reason = check()
        if reason is not None:
            raise BrokerError(503, ErrorCode.STORE_UNAVAILABLE, reason)


def store_failed(request: HttpRequest, error: Exception) -> JsonAnswer:
    """`503 store_unavailable` for a request the database failed under, never a 500: its
    connection was lost (a restart, a terminated backend) or it refused one. The broken
    connection is closed when the request ends (close_old_connections sees its error), so the
    next request connects afresh; PostgreSQL rolled back whatever was not committed."""
    reason = (str(error).splitlines() or ["no reason given"])[0][:200]
    log.warning(
        "the store failed under %s %s (%s); answered 503", request.method, request.path, reason
    )
    return error_response(store_unavailable())


def by_method(**views: ApiView) -> ApiView:
    """One path, one operation per HTTP method."""

    def route(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        view = views.get(request.method or "")
        if view is None:
            return error_response(method_not_allowed(views, request.path))
        return view.serve_sync(request, *args, **kwargs)

    return ApiView(
        route,
        "_".join(view.__name__ for view in views.values()),
        [doc for view in views.values() for doc in view.openapi],
        methods=list(views),
    )


# ---------------------------------------------------------------- Django's own refusals


def handle_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/v1/"):
        return JsonAnswer(
            {"error": {"code": ErrorCode.NOT_FOUND, "message": f"no route {request.path}"}},
            status=404,
        )
    return HttpResponse("Not found\n", status=404, content_type="text/plain; charset=utf-8")


def handle_bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's own refusals (such as a Host not allowed) stay JSON on the API."""
    if request.path.startswith("/v1/"):
        return JsonAnswer(
            {
                "error": {
                    "code": ErrorCode.BAD_REQUEST,
                    "message": "the request was refused (check Host)",
                }
            },
            status=400,
        )
    return HttpResponse("Bad request\n", status=400, content_type="text/plain; charset=utf-8")
