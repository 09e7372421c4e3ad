"""Notifications on this device: the service worker, the broker's public key, this
browser's subscription, the person's quiet hours and mail, and the unsubscribe link.

Parse -> call one action -> answer. The subscription routes take the page's strict JSON
(its exact Origin, like every settings POST) and answer JSON.
"""

from __future__ import annotations

import re
from datetime import time
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.csrf import csrf_exempt
from pydantic import Field

from board.notifications import preferences as actions
from board.notifications.vapid import public_key
from board.views import dashboard_page
from console.pages import LobbyPage
from console.web import PageRefusal, StrictForm, parse_json_post, site_of
from lobbies.errors import BrokerError, ErrorCode
from lobbies.models import Lobby

HH_MM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


class SubscriptionKeys(StrictForm):
    p256dh: str = Field(min_length=1, max_length=200)
    auth: str = Field(min_length=1, max_length=100)


class SubscriptionForm(StrictForm):
    """`PushSubscription.toJSON()` as the browser gives it."""

    endpoint: str = Field(min_length=1, max_length=1000)
    expirationTime: int | None = None  # the browser's own name
    keys: SubscriptionKeys


class EndpointForm(StrictForm):
    endpoint: str = Field(min_length=1, max_length=1000)


class PreferencesForm(StrictForm):
    time_zone: str = Field(min_length=1, max_length=64)
    quiet_from: str = Field(default="", max_length=5)
    quiet_until: str = Field(default="", max_length=5)
    mail_when_waiting: bool = False
    mail_after_minutes: int = 15


def _clock(value: str, name: str) -> time | None:
    if not value:
        return None
    if not HH_MM.match(value):
        raise PageRefusal(400, f"{name}: give the time as HH:MM", ErrorCode.INVALID_FIELD)
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def service_worker(request: HttpRequest) -> HttpResponse:
    """The worker script, served from the lobby's pages so its scope is the lobby's."""
    site = site_of(request)
    if not Lobby.objects.filter(name=site.lobby).exists():
        return render(request, "refused.html", {"message": "there is no such lobby"}, status=404)
    base = site.base
    response = HttpResponse(
        render_to_string("board/service-worker.js", {"base": base}),
        content_type="text/javascript; charset=utf-8",
    )
    response["Service-Worker-Allowed"] = f"{base}/"
    response["Cache-Control"] = "no-cache"
    return response


@dashboard_page
def key(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    if request.method != "GET":
        raise PageRefusal(405, "this address takes a GET", ErrorCode.METHOD_NOT_ALLOWED)
    return JsonResponse({"public_key": public_key()})


@dashboard_page
def subscriptions(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    if request.method == "DELETE":
        gone = parse_json_post(request, EndpointForm, method="DELETE")
        removed = actions.unsubscribe_device(page.visitor, page.lobby, gone.endpoint)
        return JsonResponse({"ok": True, "removed": removed})
    form = parse_json_post(request, SubscriptionForm)
    keys = actions.DeviceKeys(form.keys.p256dh, form.keys.auth)
    actions.subscribe_device(page.visitor, page.lobby, form.endpoint, keys)
    return JsonResponse(
        {"ok": True, "message": "Notifications are on for this device."}, status=201
    )


@dashboard_page
def preferences(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    if not page.visitor.signed_in:
        raise PageRefusal(403, "sign in to keep notification settings", ErrorCode.FORBIDDEN)
    form = parse_json_post(request, PreferencesForm)
    actions.set_alert_preferences(
        page.visitor.account,
        time_zone=form.time_zone,
        quiet_from=_clock(form.quiet_from, "quiet_from"),
        quiet_until=_clock(form.quiet_until, "quiet_until"),
        mail_when_waiting=form.mail_when_waiting,
        mail_after_minutes=form.mail_after_minutes,
    )
    return JsonResponse({"ok": True, "message": "Saved your notification settings."})


@csrf_exempt  # the signed token is the authority; the mail client's one-click POST has no page
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows one button; POST (the button, or RFC 8058's one-click) stops the mail."""
    context: dict[str, Any] = {"base": site_of(request).base, "token": token}
    if request.method == "POST":
        try:
            account = actions.stop_mail(token)
        except BrokerError as refusal:
            return render(request, "refused.html", {"message": refusal.message}, status=404)
        context["stopped"] = account.email
    elif request.method != "GET":
        return render(request, "refused.html", {"message": "use the link"}, status=405)
    return render(request, "board/unsubscribe.html", context)
