"""The agent API under /v1: parse -> call one operation -> render."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from lobbies.catalog import catalog_for, run_tool
from lobbies.http import api_view, bearer_token, json_body
from lobbies.models import Agent
from lobbies.tokens import agent_for_token


def _agent(request: HttpRequest) -> Agent:
    return agent_for_token(bearer_token(request))


@api_view(("GET",))
def tools(request: HttpRequest) -> JsonResponse:
    return JsonResponse(catalog_for(_agent(request)))


@api_view(("POST",))
def call_tool(request: HttpRequest, name: str) -> JsonResponse:
    agent = _agent(request)
    return JsonResponse(run_tool(agent, name, json_body(request)))


def operation_route(name: str, method: str) -> object:
    """A REST route that runs catalog operation `name`, exactly as POST /v1/tools/<name> does."""

    @api_view((method,))
    def route(request: HttpRequest) -> JsonResponse:
        agent = _agent(request)
        if method == "GET":
            return JsonResponse(run_tool(agent, name, request.GET.dict(), from_strings=True))
        return JsonResponse(run_tool(agent, name, json_body(request)))

    route.__name__ = name
    return route
