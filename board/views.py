"""The dashboard's pages: parse -> read the store -> render. Nothing here starts a thread;
the one write is the opening.

The full page and its live parts answer from the store at once; `dashboard_opened` only
notes the opening in the store (at most every 10 s per lobby and process), and the serve
loops of every broker (pocolobby/loops.py, `run_dashboard_work`) run the background work it
asks for (notes checks, summaries).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from board import selectors
from board.history import contents_shown_to
from board.notifications.preferences import may_get_pushes, preferences_of
from board.refresh import Picture, dashboard_opened, picture_of
from board.summaries.prices import DAILY_CEILING_USD
from board.token_chart import agent_tokens
from console.pages import LobbyPage, lobby_page

# A dashboard page: its visitors, and anyone when the owner made the dashboard public.
dashboard_page = lobby_page(public=selectors.dashboard_is_public)


def _opened(page: LobbyPage) -> None:
    """Ask the serve loops for the lobby's background work (notes checks, summaries)."""
    dashboard_opened(page.lobby.pk)


def _shows_emails(page: LobbyPage) -> bool:
    """Account emails only to a private dashboard's signed-in visitors, never to the public."""
    return page.visitor.signed_in and not selectors.dashboard_is_public(page.lobby)


def _agents(page: LobbyPage, picture: Picture | None = None) -> dict[str, Any]:
    return {"rows": selectors.agent_rows(page.lobby, timezone.now(), picture)}


def _waiting(page: LobbyPage) -> dict[str, Any]:
    questions, more_questions = selectors.question_items(page.lobby)
    return {
        "questions": questions,
        "more_questions": more_questions,
        "question_words": contents_shown_to(page.lobby, page.visitor.signed_in),
        "answered": selectors.answered_items(page.lobby, timezone.now()),
        "waiting": selectors.waiting_items(page.lobby),
        "hand_overs": selectors.hand_over_waits(page.lobby, timezone.now()),
    }


def _accounts(page: LobbyPage) -> dict[str, Any]:
    return {
        "accounts": selectors.account_groups(
            page.lobby, timezone.now(), show_emails=_shows_emails(page)
        )
    }


def _notifications(page: LobbyPage) -> dict[str, Any]:
    """This device's notifications card, for those who may have the lobby's pushes."""
    allowed = may_get_pushes(page.visitor, page.lobby)
    preferences = preferences_of(page.visitor.account) if allowed else None
    return {"push_allowed": allowed, "alert_preferences": preferences}


@dashboard_page
def dashboard(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    _opened(page)
    picture = picture_of(page.lobby)
    return render(
        request,
        "board/dashboard.html",
        page.context(
            picture=picture,
            daily_ceiling_usd=DAILY_CEILING_USD,
            **_notifications(page),
            **_waiting(page),
            **_agents(page, picture),
            **_accounts(page),
        ),
    )


@dashboard_page
def waiting_part(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(request, "board/_waiting.html", page.context(**_waiting(page)))


@dashboard_page
def agents_part(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    _opened(page)
    return render(request, "board/_agents.html", page.context(**_agents(page)))


@dashboard_page
def accounts_part(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(request, "board/_accounts.html", page.context(**_accounts(page)))


@dashboard_page
def tokens(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    series, lines = agent_tokens(page.lobby, timezone.now())
    scale = max((n for agent in series for _, n in agent.days), default=0)
    return render(
        request,
        "board/tokens.html",
        page.context(series=series, scale=scale, lines=lines, days=selectors.TOKEN_DAYS),
    )
