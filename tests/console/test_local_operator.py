"""The local operator: a one-minute, single-use ticket from the admin API, an in-memory

session, loopback Hosts only, and never the API."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from console import local
from lobbies.models import Lobby
from tests.console.conftest import LOCAL_HOST, browser_at, post_json

ADMIN = "Bearer pla_test-admin-token"

# The `broker_factory` fixture for the one test of the real command.
pytest_plugins = ("tests.server_fixtures",)


def ticket_from_api() -> str:
    answer = Client().post(
        "/v1/admin/settings-ticket", content_type="application/json", HTTP_AUTHORIZATION=ADMIN
    )
    assert answer.status_code == 200, answer.content
    return answer.json()["ticket"]


def operator_browser() -> Client:
    client = browser_at(LOCAL_HOST)
    redeemed = post_json(client, "/ticket", {"ticket": ticket_from_api()})
    assert redeemed.status_code == 200 and redeemed.json()["redirect"] == "/"
    return client


def test_the_ticket_needs_the_admin_token(db):
    answer = Client().post("/v1/admin/settings-ticket", HTTP_AUTHORIZATION="Bearer wrong")
    assert answer.status_code == 401


def test_a_ticket_works_once(db):
    ticket = ticket_from_api()
    first = post_json(browser_at(LOCAL_HOST), "/ticket", {"ticket": ticket})
    assert first.status_code == 200
    assert "__Host-pocolobby-operator" in first.cookies
    second = post_json(browser_at(LOCAL_HOST), "/ticket", {"ticket": ticket})
    assert second.status_code == 400 and "already used" in second.json()["error"]["message"]


def test_a_ticket_lasts_a_minute(db, monkeypatch):
    ticket = ticket_from_api()
    later = local.time.monotonic() + 61
    monkeypatch.setattr(local.time, "monotonic", lambda: later)
    answer = post_json(browser_at(LOCAL_HOST), "/ticket", {"ticket": ticket})
    assert answer.status_code == 400


def test_signed_out_home_says_how_to_sign_in(db):
    page = browser_at(LOCAL_HOST).get("/").content.decode()
    assert "pocolobby settings" in page and "data-ticket-status" in page


def test_the_operator_sees_every_lobby_and_creates_one(lobby):
    client = operator_browser()
    page = client.get("/").content.decode()
    assert 'href="/my-team/settings"' in page and 'href="/my-team/"' in page
    assert post_json(client, "/lobbies/create", {"name": "fresh"}).status_code == 200
    assert Lobby.objects.filter(name="fresh").exists()


def test_a_restart_signs_the_operator_out(lobby):
    client = operator_browser()
    assert client.get("/my-team/settings").status_code == 200
    local.forget_all()
    assert client.get("/my-team/settings").status_code == 403


def test_a_dns_rebinding_host_gets_nothing(lobby, settings):
    # Even a broker told to allow any Host name serves pages only at its loopback address.
    settings.ALLOWED_HOSTS = ["*"]
    client = operator_browser()
    cookie = client.cookies["__Host-pocolobby-operator"].value
    rebound = Client(HTTP_HOST="evil.example:8787")
    rebound.cookies["__Host-pocolobby-operator"] = cookie
    for path in ("/", "/my-team/settings"):
        answer = rebound.get(path)
        assert answer.status_code == 400 and b"my-team" not in answer.content
        assert b"answer only at http://127.0.0.1:8787" in answer.content
    posted = rebound.post(
        "/my-team/settings/visibility",
        data=json.dumps({"visibility": "public"}),
        content_type="application/json",
        HTTP_ORIGIN="http://evil.example:8787",
    )
    assert posted.status_code == 400


def test_the_operator_cookie_never_opens_the_api(lobby):
    client = operator_browser()
    answer = client.get("/v1/admin/lobbies")
    assert answer.status_code == 401
    assert client.get("/v1/agents").status_code == 401


def test_sign_out_ends_the_operator_session(lobby):
    client = operator_browser()
    assert post_json(client, "/sign-out", {}).status_code == 200
    assert client.get("/my-team/settings").status_code == 403


def test_a_hosted_broker_issues_no_tickets(hosted, db):
    answer = Client(HTTP_HOST="api.pocolobby.test").post(
        "/v1/admin/settings-ticket", HTTP_AUTHORIZATION=ADMIN
    )
    assert answer.status_code == 404


@pytest.mark.slow
def test_pocolobby_settings_prints_a_working_link(broker_factory):
    broker = broker_factory()
    result = broker.cli("settings", "--print")
    assert result.returncode == 0, result.stderr
    link = result.stdout.strip()
    port = broker.url.rsplit(":", 1)[1]
    assert link.startswith(f"http://127.0.0.1:{port}/#ticket=")
