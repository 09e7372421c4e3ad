"""The account area's pages: home, email-code sign-in, hand-off start and the local ticket."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render

from console import local, mail, selectors
from console.access import ACCOUNT_COOKIE, OPERATOR_COOKIE, account_of, admin_password_allowed
from console.actions import accounts, handoff, sign_in
from console.clients import client_address, client_bucket
from console.forms import CodeForm, CreateLobbyForm, EmailForm, EmptyForm, TicketForm
from console.lobby_facts import LobbyFacts, lobby_facts
from console.models import Account, SessionPlace
from console.pages import account_page, end_visit
from console.web import (
    PageRefusal,
    clear_host_cookie,
    host_cookie,
    json_ok,
    new_secret,
    parse_json_post,
    set_host_cookie,
)
from lobbies.access.hosts import hosted, lobby_origin
from lobbies.actions import operator
from lobbies.errors import ErrorCode

ACCOUNT_SESSION_SECONDS = int(sign_in.SESSION_LIFETIME.total_seconds())
# Names the browser that asked for a sign-in code; the code is bound to it.
SIGN_IN_COOKIE = "pocolobby-sign-in"
SIGN_IN_COOKIE_SECONDS = int(sign_in.CODE_LIFETIME.total_seconds())
# A pending open kept through sign-in: only this shape, so `next` can never leave the site.
PENDING_OPEN = re.compile(
    r"^/open/[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?\?verifier_hash=[0-9a-f]{64}"
    r"&next=(?:settings|dashboard)$"
)
# An admin page an operator asked for before signing in (its path only, never a query).
PENDING_ADMIN = re.compile(r"^/admin/(?:[a-z0-9_-]+/)*$")
ADMIN_DOORS = ("/admin/login/", "/admin/logout/")  # never a place to come back to
CODE_SENT = "if that address may sign in, a code is on its way"


@contextmanager
def sign_in_floor() -> Iterator[None]:
    """Answer no sooner than the floor after the request began, so timing tells nothing."""
    began = time.monotonic()
    try:
        yield
    finally:
        remaining = settings.POCOLOBBY_SIGN_IN_FLOOR_SECONDS - (time.monotonic() - began)
        if remaining > 0:
            time.sleep(remaining)


def _hosted_only() -> None:
    if not hosted():
        raise PageRefusal(
            404,
            "this broker has no accounts; its operator signs in with `pocolobby settings`",
            ErrorCode.NOT_HOSTED,
        )


def _pending(value: str) -> str:
    return value if PENDING_OPEN.match(value) or PENDING_ADMIN.match(value) else ""


def _with_facts(entries: list[tuple[str, Any]]) -> list[tuple[Any, str, LobbyFacts]]:
    """Each home entry with its lobby's origin and the facts the home shows about it."""
    facts = lobby_facts([name for name, _ in entries])
    return [(entry, lobby_origin(name), facts[name]) for name, entry in entries]


@account_page(signed_in=False)
def home(request: HttpRequest, account: Account | None) -> HttpResponse:
    if hosted():
        if account is None:
            return HttpResponseRedirect("/sign-in")
        lobbies = selectors.account_lobbies(account)
        may_create = (
            account.may_create_lobbies
            and selectors.owned_count(account) < accounts.LOBBIES_PER_ACCOUNT
        )
        return render(
            request,
            "console/home.html",
            {
                "account": account,
                "lobbies": _with_facts([(entry.name, entry) for entry in lobbies]),
                "may_create": may_create,
                "hosted": True,
            },
        )
    if not local.operator_session_valid(host_cookie(request, OPERATOR_COOKIE)):
        return render(request, "console/local_signed_out.html")
    names = selectors.all_lobby_names()
    return render(
        request,
        "console/home.html",
        {
            "lobbies": _with_facts([(name, name) for name in names]),
            "may_create": True,
            "hosted": False,
        },
    )


@account_page(signed_in=True)
def create_lobby(request: HttpRequest, account: Account | None) -> JsonResponse:
    form = parse_json_post(request, CreateLobbyForm)
    if account is not None:
        lobby = accounts.create_owned_lobby(account, form.name)
    else:
        lobby = operator.create_lobby(form.name)
    return json_ok(message=f"created lobby {lobby.name}", redirect="/")


@account_page(signed_in=False)
def sign_in_page(request: HttpRequest, account: Account | None) -> HttpResponse:
    _hosted_only()
    if request.method == "POST":
        with sign_in_floor():
            form = parse_json_post(request, EmailForm)
            browser = host_cookie(request, SIGN_IN_COOKIE) or new_secret()[0]
            sign_in.request_code(form.email, client_bucket(client_address(request)), browser)
        query = {"email": sign_in.normalise_email(form.email)}
        if _pending(form.next):
            query["next"] = form.next
        response = json_ok(message=CODE_SENT, redirect=f"/sign-in/code?{urlencode(query)}")
        # The code works only in the browser that asked for it (console/actions/sign_in.py).
        set_host_cookie(response, SIGN_IN_COOKIE, browser, SIGN_IN_COOKIE_SECONDS)
        return response
    return render(
        request,
        "console/sign_in.html",
        {"next": _pending(request.GET.get("next", "")), "mail_problem": mail.mail_problem()},
    )


@account_page(signed_in=False)
def sign_in_code(request: HttpRequest, account: Account | None) -> HttpResponse:
    _hosted_only()
    if request.method == "POST":
        with sign_in_floor():
            form = parse_json_post(request, CodeForm)
            signed = sign_in.verify_code(
                form.email,
                form.code,
                client_bucket(client_address(request)),
                host_cookie(request, SIGN_IN_COOKIE),
            )
        response = json_ok(redirect=_pending(form.next) or "/")
        clear_host_cookie(response, SIGN_IN_COOKIE)
        set_host_cookie(response, ACCOUNT_COOKIE, signed.token, ACCOUNT_SESSION_SECONDS)
        return response
    return render(
        request,
        "console/sign_in_code.html",
        {
            "email": request.GET.get("email", "")[:254],
            "next": _pending(request.GET.get("next", "")),
            "sent": CODE_SENT,
        },
    )


@account_page(signed_in=False)
def sign_out(request: HttpRequest, account: Account | None) -> JsonResponse:
    parse_json_post(request, EmptyForm)
    response = json_ok(redirect="/sign-in" if hosted() else "/")
    end_visit(request, response, SessionPlace.ACCOUNT)
    return response


@account_page(signed_in=False)
def open_lobby(request: HttpRequest, account: Account | None, lobby: str) -> HttpResponse:
    """Hand the signed-in account to the lobby's host, for the browser whose verifier hash
    came along; sign in first when needed, keeping this open pending."""
    _hosted_only()
    verifier_hash = request.GET.get("verifier_hash", "")
    target = request.GET.get("next", "dashboard")
    pending = f"/open/{lobby}?{urlencode({'verifier_hash': verifier_hash, 'next': target})}"
    if not _pending(pending):
        raise PageRefusal(
            400,
            "this link is incomplete; open the lobby's page and choose Sign in there",
            ErrorCode.BAD_LINK,
        )
    if account is None:
        return HttpResponseRedirect(f"/sign-in?{urlencode({'next': pending})}")
    token = handoff.open_handoff(account, lobby, verifier_hash, target == "settings")
    return HttpResponseRedirect(f"{lobby_origin(lobby)}/handoff?{urlencode({'token': token})}")


@account_page(signed_in=False)
def redeem_ticket(request: HttpRequest, account: Account | None) -> JsonResponse:
    """The local operator's one-time link, posted back by the page's script."""
    if hosted():
        raise PageRefusal(404, "tickets are for a local broker's operator", ErrorCode.NOT_LOCAL)
    form = parse_json_post(request, TicketForm)
    token = local.redeem_ticket(form.ticket)
    if token is None:
        raise PageRefusal(
            400,
            "that link was already used or is over a minute old; run `pocolobby settings` again",
            ErrorCode.BAD_TICKET,
        )
    response = json_ok(redirect="/")
    set_host_cookie(response, OPERATOR_COOKIE, token, local.SESSION_SECONDS)
    return response


def admin_login(request: HttpRequest) -> HttpResponse:
    """The Django admin's login. Hosted, operators sign in with the console's email code and
    the password form is off unless the broker is in password recovery (docs/OPERATIONS.md);
    elsewhere Django's form under sign-in's limits."""
    if not admin_password_allowed():
        return _admin_by_email_code(request)
    return _admin_by_password(request)


def _admin_by_email_code(request: HttpRequest) -> HttpResponse:
    """Send the browser through the console's sign-in and back to the admin page it asked for;
    an account not marked operator is told so, plainly."""
    if request.method != "GET":
        return render(request, "console/admin_refused.html", {"password": True}, status=403)
    asked = request.GET.get("next", "")
    target = asked if PENDING_ADMIN.match(asked) and asked not in ADMIN_DOORS else "/admin/"
    account = account_of(request)
    if account is None:
        return HttpResponseRedirect(f"/sign-in?{urlencode({'next': target})}")
    if account.operator:
        return HttpResponseRedirect(target)
    return render(request, "console/admin_refused.html", {"account": account}, status=403)


def _admin_by_password(request: HttpRequest) -> HttpResponse:
    """Django's password login under sign-in's limits: attempts per network, wrong passwords
    per user name whatever the network, so guessing does not scale with networks."""
    if request.method != "POST":
        return admin.site.login(request)
    client = client_bucket(client_address(request))
    username = request.POST.get("username", "")[:254]
    with transaction.atomic():
        refused = sign_in.guesses_refused("admin", username, client)
    if refused is not None:
        return HttpResponse(
            f"{refused}\n", status=refused.status, content_type="text/plain; charset=utf-8"
        )
    response = admin.site.login(request)
    if response.status_code == 200:  # the form again: the password was not right
        with transaction.atomic():
            sign_in.count_wrong_guess("admin", username)
    return response
