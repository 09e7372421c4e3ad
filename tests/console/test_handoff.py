"""Hand-off from the account area to a lobby's host, bound to the browser that began it."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import time_machine
from django.utils import timezone

from console.models import DashboardViewer, Handoff, LobbyOwner, WebSession
from lobbies.actions import operator
from tests.console.conftest import ACCOUNT_HOST, browser_at, lobby_host, post_json, sign_in

pytestmark = pytest.mark.usefixtures("hosted")


@pytest.fixture
def team(db, make_account):
    lobby = operator.create_lobby("team")
    owner = make_account("owner@example.com")
    LobbyOwner.objects.create(lobby=lobby, account=owner, created_at=timezone.now())
    DashboardViewer.objects.create(
        lobby=lobby, email="viewer@example.com", created_at=timezone.now()
    )
    return lobby


class Browser:
    """One browser: an account-area client and a lobby-host client, cookies kept per host."""

    def __init__(self) -> None:
        self.account = browser_at(ACCOUNT_HOST)
        self.lobby = browser_at(lobby_host("team"))

    def begin(self, target: str = "settings") -> str:
        """Start on the lobby host; return the account-area /open path it sends us to."""
        start = self.lobby.get(f"/sign-in?next={target}")
        assert start.status_code == 302
        assert "__Host-pocolobby-verifier" in start.cookies
        parts = urlsplit(start["Location"])
        assert parts.netloc == ACCOUNT_HOST
        return f"{parts.path}?{parts.query}"

    def open(self, path: str) -> str:
        """The account area's redirect to the lobby host's /handoff; returns its token."""
        answer = self.account.get(path)
        assert answer.status_code == 302, answer.content
        parts = urlsplit(answer["Location"])
        assert parts.netloc == lobby_host("team") and parts.path == "/handoff"
        return parse_qs(parts.query)["token"][0]

    def take(self, token: str):
        return self.lobby.get(f"/handoff?token={token}")


def test_an_owner_signs_in_from_the_lobby_host_and_lands_on_settings(team):
    browser = Browser()
    pending = browser.begin("settings")
    signed_out = browser.account.get(pending)
    assert signed_out.status_code == 302 and signed_out["Location"].startswith("/sign-in?next=")
    signed = sign_in(browser.account, "owner@example.com", next_path=pending)
    assert signed.json()["redirect"] == pending

    taken = browser.take(browser.open(pending))

    assert taken.status_code == 302 and taken["Location"] == "/settings"
    assert taken.cookies["__Host-pocolobby-verifier"].value == ""
    assert not Handoff.objects.exists()
    assert WebSession.objects.filter(place="lobby", lobby=team).count() == 1
    settings_page = browser.lobby.get("/settings")
    assert settings_page.status_code == 200 and b"Save visibility" in settings_page.content


def test_a_viewer_gets_the_dashboard_but_never_settings(team):
    browser = Browser()
    sign_in(browser.account, "viewer@example.com")
    refused = browser.account.get(browser.begin("settings"))
    assert refused.status_code == 403 and b"only the owner" in refused.content
    assert not Handoff.objects.exists()
    taken = browser.take(browser.open(browser.begin("dashboard")))
    assert taken["Location"] == "/"
    assert browser.lobby.get("/settings").status_code == 403
    answer = post_json(browser.lobby, "/settings/visibility", {"visibility": "public"})
    assert answer.status_code == 403


def test_someone_with_no_access_gets_no_hand_off(team, make_account):
    make_account("stranger@example.com")
    browser = Browser()
    sign_in(browser.account, "stranger@example.com")
    refused = browser.account.get(browser.begin("dashboard"))
    assert refused.status_code == 403 and not Handoff.objects.exists()


def test_a_replayed_hand_off_is_refused(team):
    browser = Browser()
    sign_in(browser.account, "owner@example.com")
    token = browser.open(browser.begin())
    verifier = browser.lobby.cookies["__Host-pocolobby-verifier"].value
    assert browser.take(token).status_code == 302
    browser.lobby.cookies["__Host-pocolobby-verifier"] = verifier
    sessions = WebSession.objects.count()
    replay = browser.take(token)
    assert replay.status_code == 400 and b"already used" in replay.content
    assert WebSession.objects.count() == sessions


def test_a_hand_off_opened_in_another_browser_consumes_nothing(team):
    asking = Browser()
    sign_in(asking.account, "owner@example.com")
    token = asking.open(asking.begin())
    other = Browser()
    no_verifier = other.take(token)
    assert no_verifier.status_code == 400 and b"belongs to the browser" in no_verifier.content
    other.begin()
    wrong_verifier = other.take(token)
    assert wrong_verifier.status_code == 400 and b"another browser" in wrong_verifier.content
    assert Handoff.objects.count() == 1
    assert not WebSession.objects.filter(place="lobby").exists()
    assert asking.take(token).status_code == 302


def test_an_expired_hand_off_is_refused(team):
    browser = Browser()
    sign_in(browser.account, "owner@example.com")
    with time_machine.travel(timezone.now(), tick=False) as clock:
        token = browser.open(browser.begin())
        clock.shift(timedelta(seconds=61))
        late = browser.take(token)
    assert late.status_code == 400 and b"expired" in late.content
    assert not WebSession.objects.filter(place="lobby").exists()


def test_a_second_hand_off_ends_the_browsers_earlier_session_on_that_host(team):
    browser = Browser()
    sign_in(browser.account, "owner@example.com")
    browser.take(browser.open(browser.begin()))
    first = WebSession.objects.get(place="lobby")
    browser.take(browser.open(browser.begin("dashboard")))
    sessions = WebSession.objects.filter(place="lobby")
    assert sessions.count() == 1 and sessions.get().pk != first.pk


def test_a_pending_open_must_stay_on_the_site(team):
    browser = Browser()
    page = browser.account.get("/sign-in?next=https://evil.example/")
    assert b"evil.example" not in page.content
    signed = sign_in(browser.account, "owner@example.com", next_path="//evil.example/open/x")
    assert signed.json()["redirect"] == "/"


def test_signing_out_on_the_lobby_host_ends_only_that_session(team):
    browser = Browser()
    sign_in(browser.account, "owner@example.com")
    browser.take(browser.open(browser.begin()))
    out = post_json(browser.lobby, "/sign-out", {})
    assert out.status_code == 200
    assert not WebSession.objects.filter(place="lobby").exists()
    assert WebSession.objects.filter(place="account").count() == 1
    assert browser.lobby.get("/settings").status_code == 403


def test_a_disabled_owners_lobby_session_stops_working(team, make_account):
    browser = Browser()
    sign_in(browser.account, "owner@example.com")
    browser.take(browser.open(browser.begin()))
    make_account("owner@example.com", enabled=False)
    assert browser.lobby.get("/settings").status_code == 403
    assert not WebSession.objects.exists()
