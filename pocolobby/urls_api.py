"""The API hosts' routes: /v1 only, composed from each floor's routes.

The agent API and the operator's lobby routes come from lobbies.urls; the operator's
console routes (accounts, owners, repositories, tickets) from console.operator_api; the
agents' reports (usage, turns, tokens) from board.api. Pages live in console.urls and
board.urls.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from board import api as board_api
from console import operator_api
from lobbies.api import service_answers
from lobbies.api.http import (
    Documented,
    JsonAnswer,
    api_view,
    documented,
    error_response,
    handle_bad_request,
    handle_not_found,
)
from lobbies.api.openapi import document
from lobbies.errors import ErrorCode, method_not_allowed
from pocolobby import readiness

HEALTH_METHODS = ("GET", "HEAD")


@csrf_exempt  # no cookies, no session: a refused method is 405 JSON, not a CSRF page
@documented(
    Documented(
        "GET",
        service_answers.Health,
        auth="none",
        errors=(),
        others=((503, service_answers.Unhealthy),),
        summary="Readiness for proxies and supervisors: one bounded read of the store",
    )
)
def health(request: HttpRequest) -> JsonAnswer:
    """Readiness for proxies and supervisors: one bounded read of the store, 503 without it.

    GET or HEAD, without a token; another method is 405 like on every /v1 route.
    """
    if request.method not in HEALTH_METHODS:
        return error_response(method_not_allowed(HEALTH_METHODS, request.path))
    try:
        broker = readiness.read_store()
    except readiness.StoreUnavailable as exc:
        return JsonAnswer(
            {
                "ok": False,
                "service": "pocolobby",
                "error": {"code": ErrorCode.STORE_UNAVAILABLE, "message": str(exc)},
            },
            status=503,
        )
    return JsonAnswer({"ok": True, "service": "pocolobby", **broker})


@api_view(("GET",), Documented("GET", None, auth="none", errors=()))
def openapi(request: HttpRequest) -> JsonAnswer:
    """This API's OpenAPI 3.1 document, generated from the schemas that validate requests.

    Served without a token, like /v1/health: it describes the code, which is public, and no
    lobby, agent or setting of this broker (docs/DECISIONS.md, "The published contract").
    """
    return JsonAnswer(document(__name__))


handler400 = handle_bad_request
handler404 = handle_not_found

urlpatterns = [
    path("v1/health", health),
    path("v1/openapi.json", openapi),
    path("v1/", include("lobbies.urls")),
    path("v1/usage", board_api.put_usage),
    path("v1/turns", board_api.post_turn),
    path("v1/tokens", board_api.put_tokens),
    path("v1/admin/accounts", operator_api.accounts),
    path("v1/admin/settings-ticket", operator_api.settings_ticket),
    path("v1/admin/lobbies/<str:lobby>/owner", operator_api.lobby_owner),
    path("v1/admin/lobbies/<str:lobby>/repositories", operator_api.repositories),
]
