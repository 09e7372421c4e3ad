from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import path

from board import api as board_api
from lobbies import api, operator_api
from lobbies.errors import BrokerError
from lobbies.http import error_response


def by_method(**views: Any) -> Any:
    """One path, one operation per HTTP method."""

    async def route(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        view = views.get(request.method or "")
        if view is None:
            allowed = " or ".join(views)
            return error_response(
                BrokerError(405, "method_not_allowed", f"use {allowed} on {request.path}")
            )
        return await view(request, *args, **kwargs)

    def serve_sync(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        view = views.get(request.method or "")
        if view is None:
            allowed = " or ".join(views)
            return error_response(
                BrokerError(405, "method_not_allowed", f"use {allowed} on {request.path}")
            )
        return view.serve_sync(request, *args, **kwargs)

    route.csrf_exempt = True  # type: ignore[attr-defined]
    route.serve_sync = serve_sync  # type: ignore[attr-defined]
    return route


urlpatterns = [
    path("tools", api.tools),
    path("tools/<str:name>", api.call_tool),
    path(
        "messages",
        by_method(
            GET=api.operation_route("get_messages", "GET"),
            POST=api.operation_route("send_message", "POST"),
        ),
    ),
    path("messages/acknowledge", api.operation_route("acknowledge_messages", "POST")),
    path("agents", api.operation_route("list_agents", "GET")),
    path("me/status", api.operation_route("set_status", "POST")),
    path("me/owner-requests", api.operation_route("set_owner_requests", "POST")),
    path("me/ready", api.operation_route("ready", "POST")),
    path("usage", board_api.put_usage),
    path("turns", board_api.post_turn),
    path("tokens", board_api.put_tokens),
    path("admin/accounts", operator_api.accounts),
    path("admin/settings-ticket", operator_api.settings_ticket),
    path("admin/lobbies", operator_api.lobbies),
    path("admin/lobbies/<str:lobby>/owner", operator_api.lobby_owner),
    path("admin/lobbies/<str:lobby>/repositories", operator_api.repositories),
    path("admin/lobbies/<str:lobby>", operator_api.lobby),
    path("admin/lobbies/<str:lobby>/agents", operator_api.agents),
    path("admin/lobbies/<str:lobby>/agents/<str:agent_id>", operator_api.agent),
    path("admin/lobbies/<str:lobby>/agents/<str:agent_id>/role", operator_api.agent_role),
    path(
        "admin/lobbies/<str:lobby>/agents/<str:agent_id>/permissions",
        operator_api.agent_permissions,
    ),
    path(
        "admin/lobbies/<str:lobby>/agents/<str:agent_id>/<str:action>",
        operator_api.agent_action,
    ),
    path("admin/status", operator_api.status),
]
