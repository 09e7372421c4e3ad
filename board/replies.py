"""The reply boxes' POSTs: the owner answers one agent, or writes to every agent of the
lobby; parse -> call -> answer JSON."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from board.forms import BroadcastForm, ReplyForm
from board.views import dashboard_page
from console.actions.owner_replies import broadcast_to_lobby, reply_to_agent
from console.pages import LobbyPage, actor_of
from console.web import PageRefusal, json_ok, parse_json_post
from lobbies.errors import ErrorCode

NOT_OWNER = "only this lobby's owner can answer its agents; viewers may read, not send"


def _reply_bytes() -> int:
    """Room for the largest message the send action accepts, JSON-escaped, plus the fields."""
    return settings.BOUNDS.content_bytes * 6 + 4096


# A dashboard page (the public reaches it and is told why not), answering only the owner.
@dashboard_page
def reply(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    if not page.visitor.may_change_settings:
        raise PageRefusal(403, NOT_OWNER, ErrorCode.FORBIDDEN)
    form = parse_json_post(request, ReplyForm, max_bytes=_reply_bytes())
    outcome = reply_to_agent(
        actor_of(page.visitor),
        page.lobby.pk,
        to=form.to,
        content=form.content,
        important=form.important,
        client_request_id=form.client_request_id,
        reply_to=form.reply_to,
    )
    return json_ok(
        message=f"Sent to {form.to} as the owner (message {outcome.message.pk}).",
        message_id=outcome.message.pk,
        duplicate=outcome.duplicate,
    )


@dashboard_page
def broadcast(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    if not page.visitor.may_change_settings:
        raise PageRefusal(403, NOT_OWNER, ErrorCode.FORBIDDEN)
    form = parse_json_post(request, BroadcastForm, max_bytes=_reply_bytes())
    outcome = broadcast_to_lobby(
        actor_of(page.visitor),
        page.lobby.pk,
        content=form.content,
        important=form.important,
        client_request_id=form.client_request_id,
    )
    count = len(outcome.deliveries)
    return json_ok(
        message=f"Sent to every agent ({count}) as the owner (message {outcome.message.pk}).",
        message_id=outcome.message.pk,
        recipients=count,
        duplicate=outcome.duplicate,
    )
