"""The agent API under /v1: parse -> call one operation -> render."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from lobbies.actions.runtime import RuntimeCaller, check_runtime_id
from lobbies.answers import Catalog
from lobbies.catalog import TOOLS, Caller, Tool, catalog_for, run_tool
from lobbies.credentials import stated
from lobbies.errors import bad_request
from lobbies.http import ApiView, Documented, api_view, json_body
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


@api_view(("GET",), Documented("GET", Catalog, errors=()))
def tools(request: HttpRequest) -> JsonResponse:
    """The operations this agent may call (permission-filtered), with their JSON Schemas."""
    return JsonResponse(catalog_for(_caller(request).agent))


@api_view(("POST",), *(_documented(tool, "POST", name=tool.name) for tool in TOOLS.values()))
def call_tool(request: HttpRequest, name: str) -> JsonResponse:
    return JsonResponse(run_tool(_caller(request), name, json_body(request)))


def operation_route(name: str, method: str) -> ApiView:
    """A REST route that runs catalog operation `name`, exactly as POST /v1/tools/<name> does."""

    @api_view((method,), _documented(TOOLS[name], method))
    def route(request: HttpRequest) -> JsonResponse:
        caller = _caller(request)
        if method == "GET":
            return JsonResponse(run_tool(caller, name, request.GET.dict(), from_strings=True))
        return JsonResponse(run_tool(caller, name, json_body(request)))

    route.__name__ = name
    return route
