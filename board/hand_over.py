"""The dashboard's Hand over button: the owner gives an agent to the new conversation
waiting for it; parse -> call -> answer JSON."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from board.actions import hand_over_as
from board.forms import HandOverForm
from board.views import dashboard_page
from console.pages import LobbyPage, actor_of
from console.web import PageRefusal, json_ok, parse_json_post
from lobbies.errors import ErrorCode

NOT_OWNER = "only this lobby's owner can hand an agent over; viewers may read, not change"


# A dashboard page (the public reaches it and is told why not), answering only the owner.
@dashboard_page
def hand_over_view(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    if not page.visitor.may_change_settings:
        raise PageRefusal(403, NOT_OWNER, ErrorCode.FORBIDDEN)
    form = parse_json_post(request, HandOverForm)
    handed = hand_over_as(actor_of(page.visitor), page.lobby.pk, form.agent, form.conversation)
    return json_ok(
        message=(
            f"Handed {form.agent} over: the waiting conversation is admitted and bootstraps "
            "within seconds; the one that held it is retired."
        ),
        runtime_id=handed.runtime_id,
    )
