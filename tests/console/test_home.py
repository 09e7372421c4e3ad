"""The hosted account home: your lobbies and dashboards, and creating up to three lobbies."""

from __future__ import annotations

import pytest
from django.utils import timezone

from console.models import DashboardViewer, LobbyOwner
from lobbies.actions import operator
from lobbies.models import AuditEvent, Lobby
from tests.console.conftest import ACCOUNT_HOST, browser_at, post_json, sign_in

pytestmark = pytest.mark.usefixtures("hosted")


def test_home_lists_owned_lobbies_and_viewable_dashboards_through_the_hand_off(make_account):
    ann = make_account("ann@example.com")
    mine, theirs = operator.create_lobby("mine"), operator.create_lobby("theirs")
    operator.create_lobby("hidden")
    LobbyOwner.objects.create(lobby=mine, account=ann, created_at=timezone.now())
    DashboardViewer.objects.create(lobby=theirs, email="ann@example.com", created_at=timezone.now())
    browser = browser_at(ACCOUNT_HOST)
    sign_in(browser, "ann@example.com")
    page = browser.get("/").content.decode()
    assert 'href="https://mine.pocolobby.test/sign-in?next=settings"' in page
    assert 'href="https://theirs.pocolobby.test/sign-in?next=dashboard"' in page
    assert "theirs.pocolobby.test/sign-in?next=settings" not in page
    assert "hidden" not in page
    assert "Create a lobby" not in page


def test_an_allowed_account_creates_up_to_three_lobbies_and_owns_them(make_account):
    make_account("ann@example.com", may_create_lobbies=True)
    browser = browser_at(ACCOUNT_HOST)
    sign_in(browser, "ann@example.com")
    assert "Create a lobby" in browser.get("/").content.decode()
    for name in ("one", "two", "three"):
        assert post_json(browser, "/lobbies/create", {"name": name}).status_code == 200
    event = AuditEvent.objects.get(action="lobby_created", target="one")
    assert (event.actor_kind, event.account) == ("account", "ann@example.com")
    assert LobbyOwner.objects.filter(account__email="ann@example.com").count() == 3
    fourth = post_json(browser, "/lobbies/create", {"name": "four"})
    assert fourth.status_code == 403 and "3 lobbies" in fourth.json()["error"]["message"]
    assert not Lobby.objects.filter(name="four").exists()
    assert "Create a lobby" not in browser.get("/").content.decode()


def test_an_account_without_the_allowance_cannot_create(make_account):
    make_account("ann@example.com")
    browser = browser_at(ACCOUNT_HOST)
    sign_in(browser, "ann@example.com")
    refused = post_json(browser, "/lobbies/create", {"name": "one"})
    assert refused.status_code == 403 and not Lobby.objects.exists()


def test_signed_out_visitors_are_sent_to_sign_in(db):
    answer = browser_at(ACCOUNT_HOST).get("/")
    assert answer.status_code == 302 and answer["Location"] == "/sign-in"
    refused = post_json(browser_at(ACCOUNT_HOST), "/lobbies/create", {"name": "x"})
    assert refused.status_code == 401


def test_each_lobby_shows_agents_online_what_waits_and_the_last_message(make_account):
    from lobbies.actions.messages import send_message
    from lobbies.api.schemas import SendMessage
    from lobbies.push import presence

    ann = make_account("ann@example.com")
    busy, quiet = operator.create_lobby("busy"), operator.create_lobby("quiet")
    for lobby in (busy, quiet):
        LobbyOwner.objects.create(lobby=lobby, account=ann, created_at=timezone.now())
    lead, _ = operator.add_agent("busy", "lead")
    operator.add_agent("busy", "backend")
    lead.owner_request_count = 2
    lead.save(update_fields=["owner_request_count"])
    send_message(lead, SendMessage(to="backend", content="hi", client_request_id="r-1"))
    presence.ensure_process()
    presence.open_connection(lead.pk, lead.runtime_generation)
    browser = browser_at(ACCOUNT_HOST)
    sign_in(browser, "ann@example.com")
    page = browser.get("/").content.decode()
    busy_row = page.split('data-lobby="busy"')[1].split("</li>")[0]
    assert 'data-online="1" data-agents="2"' in busy_row and "1 of 2 agents online" in busy_row
    assert 'data-waiting="2"' in busy_row and "last message <time" in busy_row
    quiet_row = page.split('data-lobby="quiet"')[1].split("</li>")[0]
    assert "0 of 0 agents online" in quiet_row and "no messages yet" in quiet_row
    assert "data-waiting" not in quiet_row
