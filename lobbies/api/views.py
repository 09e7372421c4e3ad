"""The agent API under /v1: parse -> call one operation -> render."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import quote

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from pydantic import Field

from lobbies import agent_selectors, attachment_selectors
from lobbies.access.clients import client_address, client_bucket
from lobbies.access.credentials import stated
from lobbies.access.tokens import agent_for_token
from lobbies.actions import activity as activity_actions
from lobbies.actions import attachments, enrollment
from lobbies.actions.runtime import RuntimeCaller, check_runtime_id
from lobbies.api import operator_answers
from lobbies.api.answers import AttachmentMeta, Standing, UploadAnswer
from lobbies.api.catalog import TOOLS, Caller, Result, Tool, catalog_for, parse_arguments, run_tool
from lobbies.api.http import ApiView, Documented, JsonAnswer, api_view, json_body, request_header
from lobbies.api.schemas import Operation, attachment_limits, bounded_text
from lobbies.api.service_answers import ToolList
from lobbies.errors import ErrorCode, bad_request, not_found
from lobbies.storage import blobs
from lobbies.wire.frames import GENERATION_HEADER, RUNTIME_HEADER
from lobbies.wire.media import ATTACHMENT_NAME_HEADER, ATTACHMENT_SHA256_HEADER


def _caller(request: HttpRequest) -> Caller:
    """The agent from the token; the runtime from a bridge's headers, which fence its writes."""
    names = ("authorization", RUNTIME_HEADER.lower(), GENERATION_HEADER.lower())
    given = stated({n: v for n in names if (v := request_header(request, n)) is not None})
    agent = agent_for_token(given.token)
    if given.runtime_id is None and given.generation_text is None:
        return Caller(agent)
    if given.runtime_id is None or given.generation is None:
        raise bad_request(
            f"send {RUNTIME_HEADER} and {GENERATION_HEADER} (an integer) together",
            code=ErrorCode.INVALID_RUNTIME,
        )
    return Caller(agent, RuntimeCaller(check_runtime_id(given.runtime_id), given.generation))


def _documented(tool: Tool, method: str, **bind: str) -> Documented:
    """The tool as one operation of the document: its catalog schema is the arguments."""
    return Documented(
        method,
        tool.answer,
        body=tool.schema if method != "GET" else None,
        query=tool.schema if method == "GET" else None,
        errors=tool.errors,
        bind=tuple(bind.items()),
        summary=tool.description,
    )


@api_view(("GET",), Documented("GET", ToolList, errors=()))
def tools(request: HttpRequest) -> JsonAnswer:
    """The operations this agent may call (permission-filtered), with their JSON Schemas, and
    the attachment limits a bridge obeys."""
    answer: ToolList = {
        **catalog_for(_caller(request).agent),
        "attachment_limits": attachment_limits(),
    }
    return JsonAnswer(answer)


@api_view(
    ("GET",),
    Documented("GET", Standing, errors=(), summary="The calling agent's own standing, read-only"),
)
def me(request: HttpRequest) -> JsonAnswer:
    """Accepted, enabled, paused or resting: without runtime headers this claims nothing."""
    return JsonAnswer(agent_selectors.standing(_caller(request).agent))


def _run(
    caller: Caller, name: str, raw: Mapping[str, object], from_strings: bool = False
) -> Result:
    """Run the tool. A call without runtime headers is `pocolobby msg` (or a script like it):
    when its presence is due a refresh (lobbies.actions.activity), that write shares the
    tool's transaction, so a refused call stores nothing and a send still commits once."""
    if caller.runtime is not None or not activity_actions.msg_seen_due(caller.agent):
        return run_tool(caller, name, raw, from_strings=from_strings)
    with transaction.atomic():
        result = run_tool(caller, name, raw, from_strings=from_strings)
        activity_actions.seen_through_msg(caller.agent)
    return result


@api_view(("POST",), *(_documented(tool, "POST", name=tool.name) for tool in TOOLS.values()))
def call_tool(request: HttpRequest, name: str) -> JsonAnswer:
    return JsonAnswer(_run(_caller(request), name, json_body(request)))


def operation_route(name: str, method: str) -> ApiView:
    """A REST route that runs catalog operation `name`, exactly as POST /v1/tools/<name> does."""

    @api_view((method,), _documented(TOOLS[name], method))
    def route(request: HttpRequest) -> JsonAnswer:
        caller = _caller(request)
        if method == "GET":
            return JsonAnswer(_run(caller, name, request.GET.dict(), from_strings=True))
        return JsonAnswer(_run(caller, name, json_body(request)))

    route.__name__ = name
    return route


def _attachment_id(key: str) -> int:
    if not key.isascii() or not key.isdigit() or len(key) > 18:
        raise not_found(ErrorCode.NOT_FOUND, f"no attachment {key[:40]!r}: ids are integers")
    return int(key)


def _upload_bytes(request: HttpRequest) -> bytes:
    """The raw body, read once: a retry after a database deadlock runs the view again on the
    same request. Not `request.body`, whose DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) is below the
    file limits; the fast lane bounded this body by the upload budget before it was read."""
    cached: bytes | None = getattr(request, "_pocolobby_upload", None)
    if cached is None:
        cached = request.read()
        request._pocolobby_upload = cached  # type: ignore[attr-defined]
    return cached


@api_view(
    ("PUT",),
    Documented(
        "PUT",
        UploadAnswer,
        statuses=(200, 201),
        errors=(411, 413, 415, 503, 507),
        raw_body="application/octet-stream",
        summary="Upload a file's bytes under its SHA-256: proves possession for a send",
    ),
)
def upload_attachment(request: HttpRequest, key: str) -> JsonAnswer:
    """The raw body proves possession of SHA-256 `key` (the fast lane reserved its memory)."""
    agent = _caller(request).agent
    data = _upload_bytes(request)
    outcome = attachments.upload(agent, key, request_header(request, "Content-Type") or "", data)
    return JsonAnswer(
        {"sha256": outcome.sha256, "size": outcome.size}, status=201 if outcome.created else 200
    )


@api_view(
    ("GET",),
    Documented(
        "GET",
        None,
        errors=(410,),
        raw_answer="application/octet-stream",
        summary="Download a file the reader sent or received (never the owner)",
    ),
)
def download_attachment(request: HttpRequest, key: str) -> HttpResponse:
    attachment = attachment_selectors.attachment_for(_caller(request).agent, _attachment_id(key))
    try:
        data = blobs.read(attachment.sha256)
    except FileNotFoundError:  # removed by hand from the attachments directory
        raise not_found(
            ErrorCode.NOT_FOUND, f"attachment {attachment.pk}'s content is missing on the broker"
        ) from None
    response = HttpResponse(data, content_type=attachment.media_type)
    response[ATTACHMENT_NAME_HEADER] = quote(attachment.name, safe="")
    response[ATTACHMENT_SHA256_HEADER] = attachment.sha256
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = "attachment"
    return response


@api_view(
    ("GET",),
    Documented("GET", AttachmentMeta, errors=(410,), summary="A file's name, type, size, hash"),
)
def attachment_meta(request: HttpRequest, key: str) -> JsonAnswer:
    attachment = attachment_selectors.attachment_for(_caller(request).agent, _attachment_id(key))
    return JsonAnswer({**attachment_selectors.descriptor(attachment), "sha256": attachment.sha256})


class Join(Operation):
    code: Annotated[str, bounded_text(64)] = Field(
        description="The enrolment code; case and separators do not matter"
    )


@api_view(
    ("POST",),
    Documented(
        "POST",
        operator_answers.Credential,
        Join,
        errors=(404, 409, 410, 429),
        auth="none",
        summary="Redeem an enrolment code for the agent's token (`pocolobby join`), once",
    ),
)
def join(request: HttpRequest) -> JsonAnswer:
    """The code is the credential: no token is presented, and a code that is not live counts
    against the client's network."""
    args = parse_arguments(Join, json_body(request))
    redeemed = enrollment.redeem_enrollment(args.code, client_bucket(client_address(request)))
    agent = redeemed.agent
    return JsonAnswer({"lobby": agent.lobby.name, "agent": agent.agent_id, "token": redeemed.token})
