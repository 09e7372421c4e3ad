"""One person's broker at a public https origin (POCOLOBBY_PUBLIC_ORIGIN): the operator's
one-time link works there through the trusted proxy, once and for a minute; the public name
is refused around the proxy; forwarded headers count only from POCOLOBBY_TRUSTED_PROXIES.
(tests/deploy/test_phone.py runs the same path through a real Caddy and Chromium.)"""

from __future__ import annotations

from ipaddress import ip_network
from typing import Any

import pytest
from django.test import Client, RequestFactory

from console import local
from console.clients import client_address
from tests.console.conftest import LOCAL_HOST, browser_at, post_json
from tests.console.test_local_operator import ticket_from_api

PUBLIC = "https://laptop.example.ts.net"
PUBLIC_HOST = "laptop.example.ts.net"
PROXY = "127.0.0.1"
THROUGH_PROXY = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_FOR": "100.64.0.7"}


@pytest.fixture
def personal(settings: Any) -> None:
    settings.POCOLOBBY_PUBLIC_ORIGIN = PUBLIC
    settings.POCOLOBBY_TRUSTED_PROXIES = (ip_network(PROXY),)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, PUBLIC_HOST]


def phone(**extra: Any) -> Client:
    """The phone's browser as the broker sees it: through the proxy, at the public name."""
    return browser_at(PUBLIC_HOST, REMOTE_ADDR=PROXY, **{**THROUGH_PROXY, **extra})


def signed_in_phone() -> Client:
    client = phone()
    assert post_json(client, "/ticket", {"ticket": ticket_from_api()}).status_code == 200
    return client


def test_the_ticket_answer_names_the_public_origin_only_when_set(db, settings):
    def answer() -> Any:
        return Client().post(
            "/v1/admin/settings-ticket", HTTP_AUTHORIZATION="Bearer pla_test-admin-token"
        )

    assert answer().json()["public_origin"] is None
    settings.POCOLOBBY_PUBLIC_ORIGIN = PUBLIC
    assert answer().json()["public_origin"] == PUBLIC


@pytest.mark.usefixtures("personal")
def test_the_phone_link_signs_in_once_through_the_proxy(lobby):
    ticket = ticket_from_api()
    client = phone()
    # A form from any other origin than the public one is refused, as everywhere.
    wrong = post_json(client, "/ticket", {"ticket": ticket}, origin=f"http://{PUBLIC_HOST}")
    assert wrong.status_code == 403
    first = post_json(client, "/ticket", {"ticket": ticket})
    assert first.status_code == 200, first.content
    cookie = first.cookies["__Host-pocolobby-operator"]
    assert cookie["secure"] and cookie["path"] == "/" and not cookie["domain"]
    page = client.get("/").content.decode()
    assert 'href="/my-team/"' in page
    assert client.get("/my-team/settings").status_code == 200
    again = post_json(phone(), "/ticket", {"ticket": ticket})
    assert again.status_code == 400 and "already used" in again.json()["error"]["message"]
    # The laptop's own link is the same kind of ticket, at loopback, still working.
    laptop = post_json(browser_at(LOCAL_HOST), "/ticket", {"ticket": ticket_from_api()})
    assert laptop.status_code == 200


@pytest.mark.usefixtures("personal")
def test_the_phone_link_expires_after_a_minute(db, monkeypatch):
    ticket = ticket_from_api()
    later = local.time.monotonic() + local.TICKET_SECONDS + 1
    monkeypatch.setattr(local.time, "monotonic", lambda: later)
    answer = post_json(phone(), "/ticket", {"ticket": ticket})
    assert answer.status_code == 400 and "over a minute old" in answer.json()["error"]["message"]


@pytest.mark.usefixtures("personal")
@pytest.mark.parametrize(
    ("peer", "headers"),
    [
        ("127.0.0.2", THROUGH_PROXY),  # another process on the machine, claiming the proxy
        ("192.0.2.9", THROUGH_PROXY),  # another machine (serve --host 0.0.0.0)
        (PROXY, {}),  # straight to the broker's port, no proxy in between
        (PROXY, {"HTTP_X_FORWARDED_PROTO": "http"}),  # the proxy's plain http side
    ],
)
def test_the_public_name_is_refused_around_the_proxy(lobby, peer, headers):
    cookie = signed_in_phone().cookies["__Host-pocolobby-operator"].value
    around = Client(HTTP_HOST=PUBLIC_HOST, REMOTE_ADDR=peer, **headers)
    around.cookies["__Host-pocolobby-operator"] = cookie
    for path in ("/", "/my-team/", "/my-team/settings"):
        answer = around.get(path)
        assert answer.status_code == 403, (path, answer.content)
        assert b"my-team" not in answer.content


@pytest.mark.usefixtures("personal")
def test_forwarded_headers_from_any_other_peer_are_refused(lobby):
    for header in ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_HOST", "HTTP_FORWARDED"):
        answer = Client(HTTP_HOST=LOCAL_HOST, REMOTE_ADDR="127.0.0.2", **{header: "x"}).get("/")
        assert answer.status_code == 403 and b"not this broker's proxy" in answer.content
    # Without them a loopback peer at a loopback Host is the laptop, as before.
    assert Client(HTTP_HOST=LOCAL_HOST, REMOTE_ADDR="127.0.0.2").get("/").status_code == 200


@pytest.mark.usefixtures("personal")
def test_what_the_proxy_says_must_name_the_public_host(lobby):
    other = phone(HTTP_X_FORWARDED_HOST="evil.example").get("/")
    assert other.status_code == 400 and b"X-Forwarded-Host" in other.content
    # A proxy that rewrote Host to the broker's address is told how to keep it.
    rewritten = Client(HTTP_HOST=LOCAL_HOST, REMOTE_ADDR=PROXY, **THROUGH_PROXY).get("/")
    assert rewritten.status_code == 400 and b"must pass the public name" in rewritten.content
    # A name pointed at this machine through the proxy (DNS rebinding) reaches nothing.
    rebound = Client(HTTP_HOST="evil.example", REMOTE_ADDR=PROXY, **THROUGH_PROXY).get("/")
    assert rebound.status_code == 400


@pytest.mark.usefixtures("personal")
def test_the_client_address_is_the_proxys_word_only_from_the_proxy():
    factory = RequestFactory()
    forwarded = {"HTTP_X_FORWARDED_FOR": "198.51.100.1, 100.64.0.7"}
    assert client_address(factory.get("/", REMOTE_ADDR=PROXY, **forwarded)) == "100.64.0.7"
    assert client_address(factory.get("/", REMOTE_ADDR="192.0.2.9", **forwarded)) == "192.0.2.9"
    assert client_address(factory.get("/", REMOTE_ADDR=PROXY)) == PROXY
