"""The agent API under /v1: parse -> call one operation -> render."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from lobbies.actions.runtime import RuntimeCaller, check_runtime_id
from lobbies.catalog import Caller, catalog_for, run_tool
from lobbies.credentials import stated
from lobbies.errors import bad_request
from lobbies.http import ApiView, api_view, json_body
from lobbies.tokens import agent_for_token
from lobbies.wire import GENERATION_HEADER, RUNTIME_HEADER


def _caller(request: HttpRequest) -> Caller:
    """The agent from the token; the runtime from a bridge's headers, which fence its writes."""
    given = stated(request.headers)
    agent = agent_for_token(given.token)
    if given.runtime_id is None and given.generation_text is None:
        return Caller(agent)
    if given.runtime_id is None or given.generation is None:
        raise bad_request(
            f"send {RUNTIME_HEADER} and {GENERATION_HEADER} (an integer) together",
            code="invalid_runtime",
        )
    return Caller(agent, RuntimeCaller(check_runtime_id(given.runtime_id), given.generation))


@api_view(("GET",))
def tools(request: HttpRequest) -> JsonResponse:
    return JsonResponse(catalog_for(_caller(request).agent))


@api_view(("POST",))
def call_tool(request: HttpRequest, name: str) -> JsonResponse:
    return JsonResponse(run_tool(_caller(request), name, json_body(request)))


def operation_route(name: str, method: str) -> ApiView:
    """A REST route that runs catalog operation `name`, exactly as POST /v1/tools/<name> does."""

    @api_view((method,))
    def route(request: HttpRequest) -> JsonResponse:
        caller = _caller(request)
        if method == "GET":
            return JsonResponse(run_tool(caller, name, request.GET.dict(), from_strings=True))
        return JsonResponse(run_tool(caller, name, json_body(request)))

    route.__name__ = name
    return route
