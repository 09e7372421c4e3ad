"""The agent API under /v1: parse -> call one operation -> render."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from lobbies.actions.runtime import RuntimeCaller, check_runtime_id, parse_generation
from lobbies.catalog import Caller, catalog_for, run_tool
from lobbies.errors import bad_request
from lobbies.http import api_view, bearer_token, json_body
from lobbies.tokens import agent_for_token


def _caller(request: HttpRequest) -> Caller:
    """The agent from the token; the runtime from a bridge's headers, which fence its writes."""
    agent = agent_for_token(bearer_token(request))
    runtime_id = request.headers.get("X-PocoLobby-Runtime")
    generation = request.headers.get("X-PocoLobby-Generation")
    if runtime_id is None and generation is None:
        return Caller(agent)
    if runtime_id is None or generation is None:
        raise bad_request(
            "send X-PocoLobby-Runtime and X-PocoLobby-Generation (an integer) together",
            code="invalid_runtime",
        )
    return Caller(agent, RuntimeCaller(check_runtime_id(runtime_id), parse_generation(generation)))


@api_view(("GET",))
def tools(request: HttpRequest) -> JsonResponse:
    return JsonResponse(catalog_for(_caller(request).agent))


@api_view(("POST",))
def call_tool(request: HttpRequest, name: str) -> JsonResponse:
    return JsonResponse(run_tool(_caller(request), name, json_body(request)))


def operation_route(name: str, method: str) -> object:
    """A REST route that runs catalog operation `name`, exactly as POST /v1/tools/<name> does."""

    @api_view((method,))
    def route(request: HttpRequest) -> JsonResponse:
        caller = _caller(request)
        if method == "GET":
            return JsonResponse(run_tool(caller, name, request.GET.dict(), from_strings=True))
        return JsonResponse(run_tool(caller, name, json_body(request)))

    route.__name__ = name
    return route
