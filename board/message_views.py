"""The messages page: the last day's traffic, filtered and paged; parse -> read -> render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from board import history
from board.views import dashboard_page
from console.pages import LobbyPage
from lobbies.models import Kind, Priority


def _context(request: HttpRequest, page: LobbyPage) -> dict[str, object]:
    filters = history.parse_filters(request.GET)
    shown = history.contents_shown_to(page.lobby, page.visitor.signed_in)
    listing = history.message_page(page.lobby, filters, timezone.now(), show_contents=shown)
    return page.context(listing=listing, kinds=Kind.values, priorities=Priority.values)


@dashboard_page
def messages(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(request, "board/messages.html", _context(request, page))


@dashboard_page
def messages_part(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(request, "board/_messages.html", _context(request, page))
