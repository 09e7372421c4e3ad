"""The messages page: the last day's traffic, filtered and paged; parse -> read -> render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from board import history
from board.actions import set_public_message_contents
from console.forms import PublicContentsForm
from console.lobby_views import _actor as actor_of  # the settings POSTs' one actor rule
from console.pages import LobbyPage, lobby_page
from console.web import json_ok, parse_json_post
from lobbies.models import Kind, Priority


def _context(request: HttpRequest, page: LobbyPage) -> dict[str, object]:
    filters = history.parse_filters(request.GET)
    shown = history.contents_shown_to(page.lobby, page.visitor.signed_in)
    listing = history.message_page(page.lobby, filters, timezone.now(), show_contents=shown)
    return page.context(listing=listing, kinds=Kind.values, priorities=Priority.values)


@lobby_page()
def messages(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(request, "board/messages.html", _context(request, page))


@lobby_page()
def messages_part(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(request, "board/_messages.html", _context(request, page))


@lobby_page(settings=True)
def public_contents(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, PublicContentsForm)
    set_public_message_contents(actor_of(page.visitor), page.lobby.pk, form.public_message_contents)
    shown = "shows" if form.public_message_contents else "does not show"
    return json_ok(message=f"A public dashboard {shown} message contents.")
