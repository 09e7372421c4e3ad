"""A lobby's settings page and the dashboard settings on it (visibility, how agents appear,
summaries, notes sources, viewers' notifications). The lobby's own settings (rooms, viewers,
agents, deletion) are board.settings.lobby_views; every one of them is for the owner or the
local operator only."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from board import actions, selectors
from board.notifications.preferences import preferences_of, set_viewers_get_notifications
from board.settings.forms import (
    AppearanceForm,
    NotesSourceForm,
    PublicContentsForm,
    SummaryForm,
    ViewerNotificationsForm,
    VisibilityForm,
)
from console import selectors as console_selectors
from console.pages import LobbyPage, actor_of, lobby_page
from console.web import json_ok, parse_json_post
from lobbies.access.hosts import hosted
from lobbies.attachment_selectors import lobby_attachments

VIEWER_WARNING = (
    "Adding a viewer, or making the dashboard public, shares what the summaries paraphrase "
    "from this lobby's notes and reports, what its agents say they wait on, when they sent "
    "and received messages, and how much of their Claude plans is left (the account email "
    "only to a private dashboard's viewers), so treat it like the notes themselves."
)


@lobby_page(settings=True)
def settings_page(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    return render(
        request,
        "board/settings.html",
        page.context(
            **selectors.settings_page(
                page.lobby, request.GET.get("rooms"), request.GET.get("archived")
            ),
            rooms_opened="rooms" in request.GET or "archived" in request.GET,
            viewer_warning=VIEWER_WARNING,
            hosted=hosted(),
            services=console_selectors.services(),
            attachments=lobby_attachments(page.lobby, limit=50),
            alert_preferences=preferences_of(page.visitor.account),
        ),
    )


@lobby_page(settings=True)
def visibility(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, VisibilityForm)
    actions.set_visibility(actor_of(page.visitor), page.lobby.pk, form.visibility)
    return json_ok(message=f"the dashboard is {form.visibility}")


@lobby_page(settings=True)
def appearance(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, AppearanceForm)
    actions.set_appearance(
        actor_of(page.visitor),
        page.lobby.pk,
        form.agent,
        form.emoji,
        form.display_name,
        form.hidden,
    )
    return json_ok(message=f"saved how {form.agent} appears")


@lobby_page(settings=True)
def summary(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, SummaryForm)
    actions.set_summary(actor_of(page.visitor), page.lobby.pk, form.model, form.effort)
    return json_ok(message="saved the summary settings")


@lobby_page(settings=True)
def notes_source(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, NotesSourceForm)
    actions.set_notes_source(
        actor_of(page.visitor), page.lobby.pk, form.room, form.repository, form.ref, form.paths
    )
    return json_ok(message=f"saved the notes source of {form.room}")


@lobby_page(settings=True)
def public_contents(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, PublicContentsForm)
    actions.set_public_message_contents(
        actor_of(page.visitor), page.lobby.pk, form.public_message_contents
    )
    shown = "shows" if form.public_message_contents else "does not show"
    return json_ok(message=f"A public dashboard {shown} message contents.")


@lobby_page(settings=True)
def viewer_notifications(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, ViewerNotificationsForm)
    set_viewers_get_notifications(
        actor_of(page.visitor), page.lobby.pk, form.viewers_get_notifications
    )
    may = "may" if form.viewers_get_notifications else "may not"
    return JsonResponse({"ok": True, "message": f"Viewers {may} turn on notifications."})
