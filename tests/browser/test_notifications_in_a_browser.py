"""Notifications on from the dashboard, in Chromium: the lobby's service worker registers at
the lobby's origin with the lobby's scope, the page posts the browser's subscription and the
broker keeps it; off removes it. Axe finds nothing serious on the card or the unsubscribe
page, on a phone and a desktop, light and dark.

Headless Chromium has no push service of its own to subscribe with (Chrome's is Google's),
so the page's `PushManager.subscribe` answers with a subscription whose endpoint is a
loopback https stand-in (tests/board/notifications/webpush_service.py): everything else
(permission, worker, key, POST, DELETE) is the browser's. Then an agent asks the owner
something and the broker's own serve loop pushes it to the stand-in, where the test decrypts
it with the device's key.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page, expect

from tests.board.notifications.webpush_service import (
    FAKE_PUSH_SERVICE,
    Device,
    PushService,
    Received,
    b64url,
)
from tests.browser.conftest import HostedBroker, run_hosted_broker, sign_in_through_lobby

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def push_service() -> Iterator[PushService]:
    with PushService() as running:
        yield running


@pytest.fixture(scope="module")
def hosted_broker(
    tmp_path_factory: pytest.TempPathFactory, push_service: PushService
) -> Iterator[HostedBroker]:
    yield from run_hosted_broker(
        tmp_path_factory,
        POCOLOBBY_PUSH_ENDPOINT_ALLOW=push_service.host_port,
        REQUESTS_CA_BUNDLE=str(push_service.ca),
    )


def _subscriptions(hosted: HostedBroker) -> list[tuple[str, str]]:
    path = hosted.broker.data_dir / "pocolobby.sqlite3"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT endpoint, p256dh FROM board_pushsubscription").fetchall()


def _serious(results: Any) -> list[str]:
    return [
        f"{v['id']}: {v['help']}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def test_notifications_on_and_off_from_the_dashboard(
    hosted_broker: HostedBroker, push_service: PushService, page: Page, look: str, shoot: Any
) -> None:
    lobby, owner = f"push-{look}", f"push-{look}@example.com"
    tokens = hosted_broker.seed_lobby(lobby, owner, ("backend",))
    hosted_broker.agent_call(
        tokens["backend"], "POST", "/me/owner-requests", {"count": 1, "line": "May I deploy?"}
    )
    base = hosted_broker.lobby_url(lobby)
    device = Device()
    keys = device.subscription("")["keys"]
    page.context.grant_permissions(["notifications"], origin=base)
    stand_in = push_service.endpoint(f"{look}-")
    page.add_init_script(FAKE_PUSH_SERVICE % (json.dumps(keys), stand_in))
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/")

    card = page.locator("#notifications")
    expect(card.locator("[data-push-state]")).to_contain_text("off for this device")
    with page.expect_response(lambda r: r.url.endswith("/push/subscriptions")) as posted:
        card.get_by_role("button", name="Turn on notifications on this device").click()
    assert posted.value.status == 201
    expect(card.locator("[data-push-state]")).to_contain_text("on for this device")
    scope = page.evaluate("navigator.serviceWorker.getRegistration('/').then(r => r && r.scope)")
    assert scope == f"{base}/"
    script = page.evaluate(
        "navigator.serviceWorker.getRegistration('/')"
        ".then(r => (r.active || r.waiting || r.installing).scriptURL)"
    )
    assert script == f"{base}/push/service-worker.js"
    # The browser subscribed with the broker's own public key.
    key = page.evaluate("fetch('/push/key').then(r => r.json()).then(j => j.public_key)")
    sent_key = bytes(page.evaluate("window.__applicationServerKey"))
    assert b64url(sent_key) == key
    [(endpoint, p256dh)] = _subscriptions(hosted_broker)
    assert endpoint.startswith(stand_in) and p256dh == device.p256dh

    # An agent asks again: the serve loop pushes it to this device.
    hosted_broker.agent_call(
        tokens["backend"], "POST", "/me/owner-requests", {"count": 1, "line": "Deploy at 5?"}
    )
    deadline = time.monotonic() + 15
    mine: list[Received] = []
    while not mine and time.monotonic() < deadline:
        time.sleep(0.2)
        mine = [r for r in push_service.received if endpoint.endswith(r.path)]
    assert mine, "no push reached the stand-in"
    payload = device.decrypt(mine[-1].body)
    assert payload["title"] == f"{lobby}: backend waits on you"
    assert payload["body"] in ("May I deploy?", "Deploy at 5?")

    card.locator("summary").click()
    found = _serious(Axe().run(page))
    shoot(page, "notifications-on")
    assert not found, found

    with page.expect_response(lambda r: r.url.endswith("/push/subscriptions")) as deleted:
        card.get_by_role("button", name="Turn off notifications on this device").click()
    assert deleted.value.status == 200
    expect(card.locator("[data-push-state]")).to_contain_text("off for this device")
    assert _subscriptions(hosted_broker) == []


def test_the_unsubscribe_page_reads_well(
    hosted_broker: HostedBroker, page: Page, look: str, shoot: Any
) -> None:
    lobby = f"stop-{look}"
    hosted_broker.seed_lobby(lobby, f"stop-{look}@example.com", ())
    page.goto(f"{hosted_broker.lobby_url(lobby)}/push/unsubscribe/not-a-real-token")
    expect(page.get_by_role("button", name="Stop these mails")).to_be_visible()
    found = _serious(Axe().run(page))
    shoot(page, "unsubscribe")
    assert not found, found
