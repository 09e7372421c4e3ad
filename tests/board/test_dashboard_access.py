"""Who may see a dashboard: private to its owner and listed viewers (hosted, after a
hand-off) or the local operator; public to anyone, without account emails.

The routes are found from board/urls.py (with the settings' and the console's lobby routes
it includes), so a new route of a lobby's pages is refused to strangers, or named in OPEN
with its reason, or this fails."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver
from django.utils import timezone

from board import urls
from board.models import BoardConfig, Visibility
from console.access import LOBBY_COOKIE
from console.models import Account, DashboardViewer, LobbyOwner, WebSession
from lobbies.models import Lobby
from tests.board.dashboard_helpers import LOCAL_HOST, operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

HOST = "my-team.pocolobby.test"
EMAIL = "plan-holder@example.com"


# The routes of a lobby's pages that answer without the lobby's access check, and why.
OPEN = {
    "sign-in": "where a signed-out visitor starts signing in",
    "handoff": "takes a one-time hand-off code, which is the authority",
    "sign-out": "ends the browser's own session",
    "settings/activity": "a permanent redirect to /activity, which is checked",
    "push/service-worker.js": "the worker script: no lobby data, fetched by the browser itself",
    "push/unsubscribe/<str:token>": "the signed token in the still-waiting mail is the authority",
}


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> list[str]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _routes(pattern.url_patterns, route)
        else:
            found.append(route)
    return found


ROUTES = _routes(urls.urlpatterns)
CHECKED = [route for route in ROUTES if route not in OPEN]
# The settings and everything the owner alone may do live under these.
OWNER_ONLY = [route for route in CHECKED if route.startswith(("settings", "activity"))]


def _path(route: str) -> str:
    return "/" + re.sub(r"<[^>]+>", "x", route)


def test_the_routes_are_found_from_the_url_patterns() -> None:
    assert {"", "parts/agents", "tokens", "settings", "activity"} <= set(CHECKED)
    assert set(OPEN) <= set(ROUTES), "OPEN names a route that no longer exists"


@pytest.fixture
def hosted(settings) -> None:
    settings.POCOLOBBY_DOMAIN = "pocolobby.test"
    settings.POCOLOBBY_API_HOSTS = frozenset({"api.pocolobby.test"})
    settings.ALLOWED_HOSTS = [".pocolobby.test"]


def _account(email: str) -> Account:
    return Account.objects.create(email=email, created_at=timezone.now())


def _browser_of(account: Account, lobby: Lobby) -> Client:
    """A browser holding a live lobby-host session, as a hand-off leaves it."""
    token = WebSession.open(account, lobby, timezone.now(), timedelta(hours=1))
    client = Client(HTTP_HOST=HOST)
    client.cookies[f"__Host-{LOBBY_COOKIE}"] = token
    return client


def _report_usage(agent: AgentClient) -> None:
    now = int(timezone.now().timestamp())
    body = {
        "five_hour": {"used_percentage": 10, "resets_at": now + 3600},
        "seven_day": {"used_percentage": 40, "resets_at": now + 3 * 86400},
        "account_email": EMAIL,
    }
    response = agent.client.put(
        "/v1/usage",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
        HTTP_HOST="api.pocolobby.test",
    )
    assert response.status_code == 200, response.content


def test_private_dashboard_refuses_a_signed_out_browser(hosted, lead: AgentClient) -> None:
    response = Client(HTTP_HOST=HOST).get("/", secure=True)
    assert response.status_code == 403
    assert 'data-agent="lead"' not in response.content.decode()
    part = Client(HTTP_HOST=HOST).get("/parts/agents", secure=True, HTTP_HX_REQUEST="true")
    assert part.status_code == 403 and "lead" not in part.content.decode()


@pytest.mark.parametrize("route", CHECKED)
def test_every_route_of_a_private_dashboard_refuses_strangers(
    hosted, lead: AgentClient, route: str
) -> None:
    lobby = lead.agent.lobby
    LobbyOwner.objects.create(
        lobby=lobby, account=_account("owner@example.com"), created_at=timezone.now()
    )
    stranger = _browser_of(_account("stranger@example.com"), lobby)
    signed_out = Client(HTTP_HOST=HOST)
    for browser in (stranger, signed_out):
        for answer in (
            browser.get(_path(route), secure=True),
            browser.get(_path(route), secure=True, HTTP_HX_REQUEST="true"),
            browser.post(_path(route), {}, content_type="application/json", secure=True),
        ):
            assert answer.status_code == 403, (route, answer.status_code)
            assert 'data-agent="lead"' not in answer.content.decode()


@pytest.mark.parametrize("route", OWNER_ONLY)
def test_every_settings_route_refuses_a_listed_viewer(
    hosted, lead: AgentClient, route: str
) -> None:
    lobby = lead.agent.lobby
    viewer = _account("viewer@example.com")
    DashboardViewer.objects.create(lobby=lobby, email=viewer.email, created_at=timezone.now())
    browser = _browser_of(viewer, lobby)
    assert browser.get("/", secure=True).status_code == 200  # a viewer indeed
    for answer in (
        browser.get(_path(route), secure=True),
        browser.post(_path(route), {}, content_type="application/json", secure=True),
    ):
        assert answer.status_code == 403, (route, answer.status_code)


def test_owner_sees_the_board_with_account_emails_and_a_settings_link(
    hosted, lead: AgentClient
) -> None:
    lobby = lead.agent.lobby
    owner = _account("owner@example.com")
    LobbyOwner.objects.create(lobby=lobby, account=owner, created_at=timezone.now())
    _report_usage(lead)
    html = _browser_of(owner, lobby).get("/", secure=True).content.decode()
    assert 'data-agent="lead"' in html
    assert EMAIL in html
    assert 'href="/settings"' in html and 'hx-get="/parts/agents"' in html


def test_listed_viewer_sees_the_board_but_no_settings_link(hosted, lead: AgentClient) -> None:
    lobby = lead.agent.lobby
    viewer = _account("viewer@example.com")
    DashboardViewer.objects.create(lobby=lobby, email=viewer.email, created_at=timezone.now())
    _report_usage(lead)
    html = _browser_of(viewer, lobby).get("/", secure=True).content.decode()
    assert 'data-agent="lead"' in html and EMAIL in html
    assert 'href="/settings"' not in html


def test_a_removed_viewer_loses_the_board_on_the_next_request(hosted, lead: AgentClient) -> None:
    lobby = lead.agent.lobby
    viewer = _account("viewer@example.com")
    row = DashboardViewer.objects.create(lobby=lobby, email=viewer.email, created_at=timezone.now())
    browser = _browser_of(viewer, lobby)
    assert browser.get("/parts/agents", secure=True).status_code == 200
    row.delete()
    assert browser.get("/parts/agents", secure=True).status_code == 403


def test_public_dashboard_shows_the_board_without_account_emails(hosted, lead: AgentClient) -> None:
    BoardConfig.objects.create(
        lobby=lead.agent.lobby, visibility=Visibility.PUBLIC, updated_at=timezone.now()
    )
    _report_usage(lead)
    anyone = Client(HTTP_HOST=HOST)
    html = anyone.get("/", secure=True).content.decode()
    assert 'data-agent="lead"' in html
    assert EMAIL not in html and "An account" in html
    assert 'href="/settings"' not in html
    accounts = anyone.get("/parts/accounts", secure=True).content.decode()
    assert EMAIL not in accounts and "60% left" in accounts


def test_a_public_dashboard_shows_no_account_emails_to_its_owner_either(
    hosted, lead: AgentClient
) -> None:
    lobby = lead.agent.lobby
    owner = _account("owner@example.com")
    LobbyOwner.objects.create(lobby=lobby, account=owner, created_at=timezone.now())
    BoardConfig.objects.create(lobby=lobby, visibility=Visibility.PUBLIC, updated_at=timezone.now())
    _report_usage(lead)
    html = _browser_of(owner, lobby).get("/", secure=True).content.decode()
    assert 'href="/settings"' in html  # signed in as the owner
    assert EMAIL not in html and "An account" in html


def test_local_dashboard_needs_the_operator_session(lead: AgentClient) -> None:
    assert Client(HTTP_HOST=LOCAL_HOST).get("/my-team/").status_code == 403
    forged = Client(HTTP_HOST=LOCAL_HOST)
    forged.cookies["__Host-pocolobby-operator"] = "not-a-session"
    assert forged.get("/my-team/").status_code == 403
    assert operator_client().get("/my-team/").status_code == 200


def test_lobby_pages_are_not_served_on_the_api_host(hosted, lead: AgentClient) -> None:
    response = Client(HTTP_HOST="api.pocolobby.test").get("/", secure=True)
    assert response.status_code == 404
