"""Issue 16's owner controls and issue 17's broadcast in a real browser, on a phone (390 px,
light) and a desktop (1280 px, dark): each control saves with a confirmation and leaves its
audit row on the Activity page; the owner's message to every agent reaches an agent's
session marked as the owner's; a viewer gets no broadcast box."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.agent_host import AgentSession
from tests.browser.conftest import HostedBroker, run_hosted_broker, sign_in_through_lobby

pytestmark = pytest.mark.slow

_networks = itertools.count(1)


@pytest.fixture(scope="module")
def hosted_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostedBroker]:
    """This module's broker behind one trusted proxy: each test signs in from its own network."""
    yield from run_hosted_broker(tmp_path_factory, POCOLOBBY_TRUSTED_PROXY_HOPS="1")


@pytest.fixture(params=["phone-light", "desktop-dark"])
def look(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    network = next(_networks)
    return {
        **browser_context_args,
        "extra_http_headers": {"X-Forwarded-For": f"10.16.{network // 250}.{network % 250 + 1}"},
    }


def _seed(hosted: HostedBroker, lobby: str, owner: str, viewer: str = "") -> dict[str, str]:
    return hosted.seed_lobby(lobby, owner, ("lead", "backend"), viewer)


def _no_sideways_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], "the page scrolls sideways"


def _save(page: Page, button: str, confirmation: str) -> None:
    """Press a control's button, accept its question if it asks one, and read what it says
    was saved once the page has reloaded."""
    with page.expect_navigation():
        page.get_by_role("button", name=button).click()
    expect(page.locator("[data-saved]")).to_have_text(confirmation)


def test_the_owner_controls_agents_and_delivery_from_settings(
    hosted_broker, page: Page, look: str, shoot
):
    lobby, owner = f"ops-{look}", f"ops-{look}@example.com"
    tokens = _seed(hosted_broker, lobby, owner)
    later = (datetime.now(UTC) + timedelta(hours=3)).isoformat()
    scheduled = hosted_broker.agent_call(
        tokens["lead"],
        "POST",
        "/messages",
        {
            "to": "backend",
            "content": "deploy <b>tonight</b>",
            "client_request_id": "s-1",
            "deliver_at": later,
        },
    )["message_id"]
    page.on("dialog", lambda dialog: dialog.accept())  # the controls that ask first
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/settings")
    controls = page.locator("#controls")
    expect(controls.locator("[data-scheduled]")).to_contain_text("deploy <b>tonight</b>")
    _no_sideways_scroll(page)
    shoot(page, "before")

    _save(page, "Rest backend", "backend is resting: nothing is pushed to it")
    expect(page.get_by_role("button", name="Resume backend")).to_be_visible()
    backend = page.locator('[data-agent-controls="backend"]')
    backend.get_by_text("Permissions of backend: none").click()  # folded until asked for
    backend.get_by_label("broadcast: send to every agent").check()
    _save(page, "Save permissions of backend", "saved the permissions of backend: broadcast")
    expect(backend.get_by_label("broadcast: send to every agent")).to_be_checked()
    _save(page, "Retry notifications to backend now", "notifications to backend are retried now")
    _save(page, "Pause all delivery", "delivery is paused: sends queue, nothing is pushed")
    expect(page.locator('[data-delivery="paused"]')).to_be_visible()
    _save(page, f"Cancel message {scheduled}", f"cancelled scheduled message {scheduled}")
    expect(controls.locator("[data-scheduled]")).to_have_count(0)
    _save(page, "Resume delivery", "delivery resumed: what queued is pushed now")
    _no_sideways_scroll(page)
    shoot(page, "after")

    page.get_by_role("link", name="Activity").click()
    activity = page.locator("[data-activity]")
    for line in (
        f"{owner} rested backend",
        f"{owner} set agent backend's permissions to broadcast",
        f"{owner} retried notifications to backend now",
        f"{owner} paused all delivery",
        f"{owner} cancelled scheduled message {scheduled} of lead",
        f"{owner} resumed delivery",
    ):
        expect(activity).to_contain_text(line)
    shoot(page, "activity")


def test_the_owner_writes_to_every_agent_and_a_viewer_cannot(
    hosted_broker, page: Page, look: str, shoot, tmp_path: Path
):
    lobby, owner, viewer = f"all-{look}", f"all-{look}@example.com", f"see-{look}@example.com"
    tokens = _seed(hosted_broker, lobby, owner, viewer)
    session = AgentSession(
        tmp_path, hosted_broker.broker.url, tokens["backend"], lobby, "backend"
    ).start()
    try:
        sign_in_through_lobby(page, hosted_broker, lobby, owner, "/settings")
        page.locator("#viewers > summary").click()  # folded until asked for
        page.locator("#viewer-email").fill(viewer)
        _save(page, "Add viewer", "viewer added")
        page.get_by_role("link", name="Dashboard").click()
        box = page.locator("#broadcast")
        box.get_by_text("Message every agent").click()
        box.get_by_label("Message to every agent, as the owner").fill("Freeze merges at five.")
        shoot(page, "writing")
        box.get_by_role("button", name="Send to all").dblclick()  # a double tap
        expect(box.locator("[data-form-status]")).to_contain_text(
            "Sent to every agent (2) as the owner"
        )
        _no_sideways_scroll(page)
        shoot(page, "sent")

        event = session.event_from("owner")
        assert event.meta["from"] == "owner" and event.meta["scope"] == "broadcast"
        (message,) = event.payload["messages"]
        assert (message["content"], message["from_owner"]) == ("Freeze merges at five.", True)
        inbox = hosted_broker.agent_call(tokens["lead"], "POST", "/tools/get_messages", {})
        assert [m["content"] for m in inbox["messages"] if m["from"] == "owner"] == [
            "Freeze merges at five."
        ]
        page.get_by_role("link", name="Activity").click()
        expect(page.locator("[data-activity]")).to_contain_text(
            f"{owner} sent every agent a message as the owner"
        )
        page.context.clear_cookies()
        sign_in_through_lobby(page, hosted_broker, lobby, viewer, "/")
        expect(page.locator("#agents")).to_be_visible()
        expect(page.locator("#broadcast")).to_have_count(0)
        shoot(page, "viewer")
    finally:
        session.close()
