"""What every page view shares: cookies, the strict JSON POST, and plain refusals.

Page code reads only its cookies and never `Authorization`. Every settings POST is JSON from
its page's exact origin with only its route's fields, parsed by a pydantic model that forbids
anything else; a refusal names what was wrong and changes nothing.
"""

from __future__ import annotations

import secrets
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from pydantic import BaseModel, ConfigDict, ValidationError

from lobbies.access.hosts import Site, page_origin
from lobbies.access.tokens import hash_token
from lobbies.errors import ErrorCode
from lobbies.wire.jsontext import JsonTooDeep, load_json

MAX_FORM_BYTES = 16 * 1024

Form = TypeVar("Form", bound=BaseModel)


class StrictForm(BaseModel):
    """A settings route's fields: nothing more, nothing coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=True)


class PageRefusal(Exception):
    """A request a page refuses, with the status and a sentence for the person."""

    def __init__(self, status: int, message: str, code: ErrorCode = ErrorCode.REFUSED) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def site_of(request: HttpRequest) -> Site:
    # django-stubs types request.site as django.contrib.sites' Site; HostRouting sets ours.
    site: Site = request.site  # type: ignore[assignment]
    return site


def new_secret() -> tuple[str, str]:
    """A fresh cookie or link token and the SHA-256 to store; the token is never stored."""
    token = secrets.token_urlsafe(32)
    return token, digest(token)


digest = hash_token  # the same SHA-256 the agent tokens are stored under


def set_host_cookie(response: HttpResponse, name: str, value: str, max_age: int) -> None:
    """A `__Host-` cookie: Secure, Path=/, no Domain, so it stays on this one host."""
    response.set_cookie(
        f"__Host-{name}",
        value,
        max_age=max_age,
        path="/",
        secure=True,
        httponly=True,
        samesite="Lax",
    )


def host_cookie(request: HttpRequest, name: str) -> str:
    return request.COOKIES.get(f"__Host-{name}", "")


def clear_host_cookie(response: HttpResponse, name: str) -> None:
    response.delete_cookie(f"__Host-{name}", path="/", samesite="Lax")
    # delete_cookie sets Secure only for __Secure-/__Host- names it recognises; make sure.
    response.cookies[f"__Host-{name}"]["secure"] = True


def parse_json_post(
    request: HttpRequest,
    form: type[Form],
    *,
    max_bytes: int = MAX_FORM_BYTES,
    method: str = "POST",
) -> Form:
    """The route's fields from a JSON body sent by this page's exact origin, or a refusal."""
    if request.method != method:
        raise PageRefusal(405, f"this address takes a {method}", ErrorCode.METHOD_NOT_ALLOWED)
    expected = page_origin(request.get_host())
    origin = request.headers.get("Origin", "")
    if origin != expected:
        raise PageRefusal(
            403,
            f"this form must be sent from {expected} (it came from {origin or 'nowhere'})",
            ErrorCode.BAD_ORIGIN,
        )
    if request.content_type != "application/json":
        raise PageRefusal(415, "send the form as application/json", ErrorCode.BAD_CONTENT_TYPE)
    if len(request.body) > max_bytes:
        raise PageRefusal(413, f"the form is larger than {max_bytes} bytes", ErrorCode.TOO_LARGE)
    try:
        data = load_json(request.body or b"null", what="the form")
    except JsonTooDeep as error:
        raise PageRefusal(400, str(error), ErrorCode.BAD_JSON) from None
    except ValueError:
        raise PageRefusal(400, "the form is not valid JSON", ErrorCode.BAD_JSON) from None
    if not isinstance(data, dict):
        raise PageRefusal(400, "the form must be a JSON object", ErrorCode.BAD_JSON)
    try:
        return form.model_validate(data)
    except ValidationError as error:
        raise PageRefusal(400, describe(error), ErrorCode.INVALID_FIELD) from None


def describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(p) for p in item["loc"]) or "the form"
        if item["type"] == "extra_forbidden":
            parts.append(f"{where}: not a field of this form")
        else:
            parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def refusal_response(request: HttpRequest, refusal: PageRefusal) -> HttpResponse:
    """JSON for the page's script, a small page for a browser's navigation."""
    if request.method in ("POST", "DELETE") or request.headers.get("HX-Request"):
        return JsonResponse(
            {"error": {"code": refusal.code, "message": refusal.message}}, status=refusal.status
        )
    return render(request, "refused.html", {"message": refusal.message}, status=refusal.status)


def json_ok(**fields: Any) -> JsonResponse:
    return JsonResponse({"ok": True, **fields})
