"""An owner signs in with an emailed code, is handed to the lobby's host, changes a setting
and signs out, in Chromium at desktop and phone width, light and dark."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow


def test_an_owner_signs_in_changes_visibility_and_signs_out(
    hosted_broker, page: Page, look: str, shoot
):
    lobby, email = f"team-{look}", f"owner-{look}@example.com"
    hosted_broker.admin("POST", "/lobbies", {"name": lobby})
    hosted_broker.admin("POST", "/accounts", {"email": email})
    hosted_broker.admin("PUT", f"/lobbies/{lobby}/owner", {"email": email})
    lobby_url = hosted_broker.lobby_url(lobby)

    # A signed-out visitor at the lobby's settings is offered sign-in, nothing more.
    page.goto(f"{lobby_url}/settings")
    expect(page.locator("#visibility")).to_have_count(0)
    page.get_by_role("link", name="Sign in with your email").click()

    # The account area (another host) mails a code.
    expect(page).to_have_url(re.compile(rf"^{re.escape(hosted_broker.account_url)}/sign-in"))
    page.locator("input[name=email]").fill(email)
    shoot(page, "1-sign-in")
    page.wait_for_load_state()
    page.get_by_role("button", name="Send me a code").click()
    page.wait_for_url(re.compile(r".*/sign-in/code.*"))
    page.wait_for_load_state()
    page.locator("input[name=code]").fill(hosted_broker.latest_code(email))
    shoot(page, "2-code")
    page.get_by_role("button", name="Sign in").click()

    # The hand-off lands on the lobby's own host, in its settings.
    expect(page).to_have_url(f"{lobby_url}/settings")
    page.wait_for_load_state()
    expect(page.locator("#visibility")).to_be_visible()
    shoot(page, "3-settings")
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["__Host-pocolobby-lobby"]["domain"] == f"{lobby}.pocolobby.localhost"
    assert (
        cookies["__Host-pocolobby-lobby"]["secure"]
        and cookies["__Host-pocolobby-lobby"]["httpOnly"]
    )

    # Change a setting; the page reloads showing it stored, its folded section still open.
    page.locator("#visibility > summary").click()
    page.locator("#visibility input[value=public]").check()
    with (
        page.expect_navigation(),  # the form reloads the page once the answer is in
        page.expect_response(lambda r: r.url.endswith("/settings/visibility")) as saved,
    ):
        page.get_by_role("button", name="Save visibility").click()
    assert saved.value.ok, saved.value.text()
    expect(page.locator("#visibility input[value=public]")).to_be_checked()
    expect(page.locator("#visibility input[value=public]")).to_be_visible()
    page.reload()
    expect(page.locator("#visibility input[value=public]")).to_be_checked()
    shoot(page, "4-changed")

    # Sign out on the lobby's host: its settings are closed again.
    with page.expect_response(lambda r: r.url.endswith("/sign-out")) as signed_out:
        page.get_by_role("button", name="Sign out").first.click()
    assert signed_out.value.ok
    page.wait_for_url(f"{lobby_url}/")  # the page follows the answer's redirect
    page.wait_for_load_state()
    page.goto(f"{lobby_url}/settings")
    expect(page.locator("#visibility")).to_have_count(0)
    expect(page.get_by_role("link", name="Sign in with your email")).to_be_visible()
    shoot(page, "5-signed-out")
