"""The local operator, signed in by `pocolobby settings`'s ticket, disables and re-enables an
agent from the Django admin and reads the messages list, in Chromium at phone width; a hosted
broker's operator signs in to the admin with an emailed code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ADMIN_TOKEN, enter_emailed_code
from tests.server import Broker, admin

pytestmark = pytest.mark.slow


@pytest.fixture(params=["phone-light"])
def look(request: pytest.FixtureRequest) -> str:
    """The admin at phone width only: the other looks are the console's tests' business."""
    return str(request.param)


@pytest.fixture(scope="module")
def local_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = Broker(
        tmp_path_factory.mktemp("admin-broker"), env={"POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN}
    ).start()
    yield broker
    broker.stop()


def admin_api(broker: Broker, method: str, path: str, body: Any = None) -> Any:
    return admin(broker.url, ADMIN_TOKEN, method, path, body)


def enabled(broker: Broker, agent: str) -> bool:
    agents = admin_api(broker, "GET", "/lobbies/admin-team/agents")["agents"]
    return {a["agent_id"]: a["enabled"] for a in agents}[agent]


def choose(page: Page, agent: str, action: str) -> None:
    """Tick the agent's row, pick the action and press Go, as an operator would."""
    page.locator("#result_list tbody tr", has_text=agent).locator("input.action-select").check()
    page.locator("select[name=action]").select_option(action)
    page.get_by_role("button", name="Go").click()
    page.wait_for_load_state()


def test_the_operator_disables_and_enables_an_agent_at_phone_width(local_broker, page: Page, shoot):
    broker = local_broker
    admin_api(broker, "POST", "/lobbies", {"name": "admin-team"})
    lead = admin_api(broker, "POST", "/lobbies/admin-team/agents", {"agent_id": "lead"})
    admin_api(broker, "POST", "/lobbies/admin-team/agents", {"agent_id": "backend"})
    sent = httpx.post(
        f"{broker.url}/v1/tools/send_message",
        json={"to": "backend", "content": "Review <b>this</b>", "client_request_id": "r-1"},
        headers={"Authorization": f"Bearer {lead['token']}"},
        timeout=10,
    )
    assert sent.status_code == 200, sent.text
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)

    # `pocolobby settings`'s link: no Django user exists, the ticket is the sign-in.
    ticket = admin_api(broker, "POST", "/settings-ticket")["ticket"]
    page.goto(f"{broker.url}/#ticket={ticket}")
    # The signed-out page posts the ticket, then goes to the console's home itself
    # (location.assign). Only once it is gone can our own navigation not be interrupted.
    expect(page.locator("[data-ticket-status]")).to_have_count(0, timeout=10_000)
    page.wait_for_load_state()
    assert any(c["name"] == "__Host-pocolobby-operator" for c in page.context.cookies())
    page.goto(f"{broker.url}/admin/lobbies/agent/")
    expect(page.locator("#result_list")).to_contain_text("backend")

    choose(page, "backend", "disable")
    expect(page.get_by_role("heading", name="Disable these agents?")).to_be_visible()
    shoot(page, "1-confirm-disable")
    assert enabled(broker, "backend")  # asking changed nothing
    page.get_by_role("button", name="Yes, disable").click()
    page.wait_for_load_state()
    expect(page.locator(".messagelist")).to_contain_text(
        re.compile("disabled: backend in admin-team", re.I)
    )
    shoot(page, "2-disabled")
    assert not enabled(broker, "backend")

    choose(page, "backend", "enable")
    expect(page.locator(".messagelist")).to_contain_text(
        re.compile("enabled: backend in admin-team", re.I)
    )
    assert enabled(broker, "backend")

    page.goto(f"{broker.url}/admin/lobbies/message/")
    expect(page.locator("#result_list")).to_contain_text("Review <b>this</b>")
    expect(page.locator("#result_list")).to_contain_text("backend: held")
    expect(page.locator("#result_list b")).to_have_count(0)
    shoot(page, "3-messages")
    assert not refused, refused


def test_a_hosted_operator_signs_in_to_the_admin_with_an_emailed_code(
    hosted_broker, page: Page, shoot
):
    email = "operator@example.com"
    hosted_broker.admin("POST", "/accounts", {"email": email, "operator": True})
    account_url = hosted_broker.account_url

    page.goto(f"{account_url}/admin/")
    expect(page).to_have_url(f"{account_url}/sign-in?next=%2Fadmin%2F")
    enter_emailed_code(page, hosted_broker, email)

    expect(page).to_have_url(f"{account_url}/admin/")
    expect(page.get_by_text(email).first).to_be_visible()
    expect(page.get_by_role("link", name="Lobbies", exact=True)).to_be_visible()
    shoot(page, "hosted-admin")
