"""The agent API's and the operator's lobby routes under /v1 (composed in pocolobby/urls_api.py)."""

from __future__ import annotations

from django.urls import path

from lobbies.api import operator_api, views
from lobbies.api.http import by_method

urlpatterns = [
    path("tools", views.tools),
    path("join", views.join),
    path("tools/<str:name>", views.call_tool),
    path(
        "messages",
        by_method(
            GET=views.operation_route("get_messages", "GET"),
            POST=views.operation_route("send_message", "POST"),
        ),
    ),
    path("messages/acknowledge", views.operation_route("acknowledge_messages", "POST")),
    path("agents", views.operation_route("list_agents", "GET")),
    path("me", views.me),
    path("me/status", views.operation_route("set_status", "POST")),
    path("me/owner-requests", views.operation_route("set_owner_requests", "POST")),
    path("me/ready", views.operation_route("ready", "POST")),
    # One path: PUT /v1/attachments/<sha256> uploads, GET /v1/attachments/<id> downloads.
    path(
        "attachments/<str:key>",
        by_method(GET=views.download_attachment, PUT=views.upload_attachment),
    ),
    path("attachments/<str:key>/meta", views.attachment_meta),
    path("admin/lobbies", operator_api.lobbies),
    path("admin/lobbies/<str:lobby>", operator_api.lobby),
    path("admin/lobbies/<str:lobby>/delivery", operator_api.lobby_delivery),
    path("admin/lobbies/<str:lobby>/cancel-scheduled", operator_api.lobby_cancel_scheduled),
    path("admin/lobbies/<str:lobby>/attachments", operator_api.lobby_attachments),
    path("admin/lobbies/<str:lobby>/agents", operator_api.agents),
    path("admin/lobbies/<str:lobby>/agents/<str:agent_id>", operator_api.agent),
    path("admin/lobbies/<str:lobby>/agents/<str:agent_id>/role", operator_api.agent_role),
    path(
        "admin/lobbies/<str:lobby>/agents/<str:agent_id>/<str:action>",
        operator_api.agent_action,
    ),
    path("admin/lobbies/<str:lobby>/owner-messages", operator_api.lobby_owner_message),
    path("admin/team", operator_api.team_apply),
    path("admin/status", operator_api.status),
    path("admin/restore/finish", operator_api.restore_finish),
]
