"""The local operator: a one-minute, single-use ticket from the admin API, an in-memory

session, loopback Hosts only, and never the API."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from django.test import Client

from console import local
from lobbies.actions import operator
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
def test_pocolobby_settings_prints_a_working_link_and_starts_no_browser(broker_factory, tmp_path):
    """The ticket never reaches another process's command line (which any local user can
    read): even with a display and $BROWSER set, the link is only printed."""
    broker = broker_factory()
    opened = tmp_path / "browser-was-started"
    recorder = tmp_path / "browser.sh"
    recorder.write_text(f'#!/bin/sh\necho "$@" > {opened}\n')
    recorder.chmod(0o700)
    result = broker.cli("settings", env={"DISPLAY": ":0", "BROWSER": str(recorder)})
    assert result.returncode == 0, result.stderr
    explanation, link = result.stdout.strip().splitlines()
    assert "works once, for one minute" in explanation
    port = broker.url.rsplit(":", 1)[1]
    assert link.startswith(f"http://127.0.0.1:{port}/#ticket=")
    assert not opened.exists()
    redeemed = httpx.post(
        f"http://127.0.0.1:{port}/ticket",
        json={"ticket": link.split("#ticket=", 1)[1]},
        headers={"Origin": f"http://127.0.0.1:{port}"},
    )
    assert redeemed.status_code == 200, redeemed.text
    # A QR code is for a phone, which needs the public origin (tests/deploy/test_phone.py).
    qr = broker.cli("settings", "--qr")
    assert qr.returncode == 1 and "--qr needs the broker's public https origin" in qr.stderr
    assert "#ticket=" not in qr.stdout


async def _asgi_get(path: str, peer: str) -> tuple[int, bytes]:
    """One request through the real ASGI application, from `peer` as the server saw it."""
    from pocolobby.asgi import application  # imported here: it sets Django's ASGI handler up

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", LOCAL_HOST.encode())],
        "client": (peer, 50000),
        "server": ("192.0.2.2", 8787),
    }
    sent: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/", "/my-team/", "/my-team/settings"])
def test_local_pages_refuse_a_peer_on_another_machine_whatever_its_host_header(path):
    """`serve --host 0.0.0.0` shares the API with the network, not the operator's pages."""
    operator.create_lobby("my-team")
    status, body = asyncio.run(_asgi_get(path, "192.0.2.9"))
    assert status == 403 and b"only on this machine" in body
    for peer in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        status, body = asyncio.run(_asgi_get(path, peer))
        assert b"only on this machine" not in body and status < 500


@pytest.mark.django_db(transaction=True)
def test_the_api_still_answers_a_peer_on_another_machine():
    status, _ = asyncio.run(_asgi_get("/v1/health", "192.0.2.9"))
    assert status == 200
