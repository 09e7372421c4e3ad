"""Issue 17's pages on a phone and a desktop, light and dark: the owner answers a waiting
request from the phone and the agent's session receives it marked as the owner's; a viewer
gets no reply box; the messages page filters and pages; axe finds nothing serious on any
page."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page, expect

from tests.browser.agent_host import AgentSession
from tests.browser.conftest import HostedBroker, run_hosted_broker, sign_in_through_lobby

pytestmark = pytest.mark.slow

_networks = itertools.count(1)


@pytest.fixture(scope="module")
def hosted_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostedBroker]:
    """This module's own broker behind one trusted proxy, so each test can sign in from its
    own network without meeting the per-network sign-in limits the other tests count on."""
    yield from run_hosted_broker(tmp_path_factory, POCOLOBBY_TRUSTED_PROXY_HOPS="1")


@pytest.fixture
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    network = next(_networks)
    return {
        **browser_context_args,
        "extra_http_headers": {"X-Forwarded-For": f"10.17.{network // 250}.{network % 250 + 1}"},
    }


def _seed(hosted: HostedBroker, lobby: str, owner: str, viewer: str = "") -> dict[str, str]:
    tokens = hosted.seed_lobby(lobby, owner, ("lead", "backend"), viewer)
    hosted.agent_call(
        tokens["backend"],
        "POST",
        "/me/owner-requests",
        {"count": 1, "line": "May I ship the release to production?"},
    )
    return tokens


def _no_sideways_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], "the page scrolls sideways"


def test_the_owner_answers_a_waiting_request_and_the_agent_hears_the_owner(
    hosted_broker, page: Page, look: str, shoot, tmp_path: Path
):
    lobby, owner = f"reply-{look}", f"boss-{look}@example.com"
    tokens = _seed(hosted_broker, lobby, owner)
    session = AgentSession(
        tmp_path, hosted_broker.broker.url, tokens["backend"], lobby, "backend"
    ).start()
    try:
        sign_in_through_lobby(page, hosted_broker, lobby, owner, "/")
        waiting = page.locator('#waiting [data-agent="backend"]')
        expect(waiting).to_contain_text("May I ship the release to production?")
        waiting.get_by_text("Reply to backend").click()
        box = waiting.get_by_label("Message to backend, as the owner")
        box.fill("Yes, ship it after the smoke test.")
        waiting.get_by_label("Important").check()
        shoot(page, "writing")
        waiting.get_by_role("button", name="Send").dblclick()  # a double tap
        expect(waiting.locator("[data-form-status]")).to_contain_text(
            "Sent to backend as the owner"
        )
        expect(box).to_have_value("")
        _no_sideways_scroll(page)
        shoot(page, "sent")

        event = session.event_from("owner")
        assert event.meta["from"] == "owner" and event.meta["priority"] == "important"
        assert "from the lobby's human owner" in event.headline
        (message,) = event.payload["messages"]
        assert message["from_owner"] is True
        assert message["content"] == "Yes, ship it after the smoke test."
        history = session.call("get_messages", view="history")["messages"]
        assert [m["content"] for m in history if m["from"] == "owner"] == [message["content"]]
    finally:
        session.close()


def test_a_viewer_sees_the_request_but_no_reply_box(hosted_broker, page: Page, look: str, shoot):
    lobby, owner, viewer = f"look-{look}", f"own-{look}@example.com", f"see-{look}@example.com"
    _seed(hosted_broker, lobby, owner, viewer)
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/settings")
    page.locator("#viewers > summary").click()  # folded until asked for
    page.locator("#viewer-email").fill(viewer)
    with page.expect_navigation():
        page.get_by_role("button", name="Add viewer").click()
    expect(page.locator("[data-saved]")).to_have_text("viewer added")
    expect(page.locator("[data-viewer-warning]")).to_have_count(1)  # one privacy warning
    shoot(page, "settings")
    page.context.clear_cookies()
    sign_in_through_lobby(page, hosted_broker, lobby, viewer, "/")
    expect(page.locator("#waiting")).to_contain_text("May I ship the release")
    expect(page.locator("details[data-reply]")).to_have_count(0)
    expect(page.get_by_role("link", name="Settings")).to_have_count(0)
    shoot(page, "viewer")


def test_the_messages_page_filters_and_pages(hosted_broker, page: Page, look: str, shoot):
    lobby, owner = f"traffic-{look}", f"read-{look}@example.com"
    tokens = _seed(hosted_broker, lobby, owner)
    for n in range(30):
        sender, to = ("lead", "backend") if n % 3 else ("backend", "lead")
        hosted_broker.agent_call(
            tokens[sender],
            "POST",
            "/messages",
            {
                "to": to,
                "content": f"update {n}: <b>not bold</b> " + ("long " * 100 if n == 29 else ""),
                "client_request_id": f"m-{n}",
                **({"kind": "request"} if n % 5 == 0 else {}),
            },
        )
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/")
    page.get_by_role("link", name="Messages").click()
    items = page.locator("#messages li.message")
    expect(items).to_have_count(25)
    expect(items.first).to_contain_text("update 29: <b>not bold</b>")  # text, not markup
    expect(items.first.locator("details.content")).to_have_count(1)  # the long one is folded
    _no_sideways_scroll(page)
    shoot(page, "newest")
    page.get_by_role("link", name="Older").click()
    expect(items).to_have_count(5)
    expect(page.get_by_role("link", name="Newest")).to_be_visible()
    page.get_by_label("Agent").select_option("backend")
    page.get_by_label("Kind").select_option("request")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r".*agent=backend.*kind=request"))
    expect(items).to_have_count(6)  # n = 0, 5, ..., 25: each to or from backend
    page.get_by_label("Text").fill("update 15:")
    page.get_by_role("button", name="Filter").click()
    expect(items).to_have_count(1)
    expect(items.first.locator('[data-recipient="lead"] .chip')).to_have_text("stored")
    shoot(page, "filtered")


def _serious(results: Any) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def test_axe_finds_nothing_serious_on_any_page(hosted_broker, page: Page, look: str, shoot):
    lobby, owner = f"axe-{look}", f"axe-{look}@example.com"
    tokens = _seed(hosted_broker, lobby, owner)
    hosted_broker.agent_call(
        tokens["lead"],
        "POST",
        "/messages",
        {"to": "backend", "content": "hello", "client_request_id": "a-1", "priority": "important"},
    )
    axe = Axe()
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/")
    found = {}
    base = hosted_broker.lobby_url(lobby)
    for path in ("/", "/messages", "/tokens", "/settings", "/activity"):
        page.goto(f"{base}{path}")
        page.wait_for_load_state()
        if path == "/":  # with a reply box open, as an owner answering sees it
            page.locator("details[data-reply]").first.evaluate("d => d.open = true")
        found[path] = _serious(axe.run(page))
        shoot(page, path.strip("/").replace("/", "-") or "dashboard")
        if path == "/settings":  # and every folded section open, as an owner changing it
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            found["/settings unfolded"] = _serious(axe.run(page))
            shoot(page, "settings-unfolded")
    page.goto(hosted_broker.account_url + "/")
    page.wait_for_load_state()
    found["account home"] = _serious(axe.run(page))
    shoot(page, "account-home")
    page.context.clear_cookies()
    page.goto(f"{base}/")
    found["signed out"] = _serious(axe.run(page))
    assert not any(found.values()), found
    # The keyboard reaches the tabs with a visible focus ring.
    page.goto(f"{base}/")
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")


def test_settings_put_notifications_and_delivery_first_and_fold_the_rest(
    hosted_broker, page: Page, look: str, shoot
):
    """Issue 32: on a phone the owner finds notifications (push, quiet hours, the mail
    opt-in) and the delivery controls first and open; every other section is a closed
    details that opens with a tap, no script needed."""
    lobby, owner = f"fold-{look}", f"fold-{look}@example.com"
    _seed(hosted_broker, lobby, owner)
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/settings")
    expect(page.get_by_label("Mail me when something still waits")).to_be_visible()
    expect(page.get_by_role("button", name="Pause all delivery")).to_be_visible()
    expect(page.get_by_role("button", name="Rest backend")).to_be_visible()
    order = page.evaluate(
        "[...document.querySelectorAll('main > section, main > details')].map(e => e.id)"
    )
    assert order[:3] == ["notifications", "notification-settings", "controls"], order
    folds = page.locator("main > details.fold")
    assert set(order[3:]) == set(folds.evaluate_all("ds => ds.map(d => d.id)"))
    assert folds.evaluate_all("ds => ds.every(d => !d.open)")
    expect(page.locator("#viewer-email")).to_be_hidden()
    folded = page.evaluate("document.documentElement.scrollHeight")
    _no_sideways_scroll(page)
    shoot(page, "folded")
    page.locator("#viewers > summary").click()
    expect(page.locator("#viewer-email")).to_be_visible()
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert page.evaluate("document.documentElement.scrollHeight") > folded * 1.5
    _no_sideways_scroll(page)
