"""Questions to the owner, end to end, at phone width: one agent asks through its bridge (a
real bridge subprocess driven by an MCP client), another through `pocolobby msg send owner
... --kind question`; both wait in Waiting for you, on the lobby list's count and in
`pocolobby status`, and a push reaches the owner's subscribed device (the loopback push
stand-in). The owner answers one from the dashboard and one from the Messages page: each
shows answered, the count drops, and each agent receives the reply naming its question.
Screenshots of Waiting for you with a question and an answered item, light and dark, go to
test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.board.notifications.webpush_service import Device, PushService, Received
from tests.browser.agent_host import AgentSession
from tests.browser.conftest import (
    ADMIN_TOKEN,
    ARTIFACTS,
    HostedBroker,
    run_hosted_broker,
    sign_in_through_lobby,
)
from tests.browser.test_notifications_in_a_browser import FAKE_PUSH_SERVICE
from tests.server import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(params=["phone-light"])
def look(request: pytest.FixtureRequest) -> str:
    """Phone width only; the dark screenshots switch the page's colour scheme in place."""
    return str(request.param)


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


def _pocolobby(hosted: HostedBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", *args],
        cwd=REPO_ROOT,
        env=hosted.broker.cli_env({"POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _shell_config(hosted: HostedBroker, directory: Path, lobby: str, token: str) -> Path:
    config = directory / "lead.json"
    body = {"url": hosted.broker.url, "token": token, "lobby": lobby, "agent": "lead"}
    config.write_text(json.dumps(body))
    config.chmod(0o600)
    return config


def _pushes(push_service: PushService, prefix: str, count: int) -> list[Received]:
    """The pushes that reached the stand-in at endpoints under `prefix` (the page's fake
    subscribe adds a time stamp to it)."""
    path = prefix.split("/push/", 1)[1]
    deadline = time.monotonic() + 20
    mine: list[Received] = []
    while len(mine) < count and time.monotonic() < deadline:
        time.sleep(0.2)
        mine = [r for r in push_service.received if r.path.startswith(f"/push/{path}")]
    assert len(mine) >= count, f"{len(mine)} of {count} pushes reached the stand-in"
    return mine


def _screenshots(page: Page, name: str) -> None:
    """Waiting for you alone, light and dark, at the page's phone width."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.locator("#waiting").screenshot(path=str(ARTIFACTS / f"{name}--phone-{scheme}.png"))
    page.emulate_media(color_scheme="light")


def _waiting_count(page: Page, hosted: HostedBroker, lobby: str) -> str | None:
    """The lobby list's "N waiting for you" (None: nothing waits)."""
    page.goto(f"{hosted.account_url}/")
    row = page.locator(f'[data-lobby="{lobby}"]')
    expect(row).to_be_visible()
    chip = row.locator("[data-waiting]")
    return chip.get_attribute("data-waiting") if chip.count() else None


def test_questions_to_the_owner_wait_push_and_are_answered_from_both_pages(
    hosted_broker: HostedBroker, push_service: PushService, page: Page, tmp_path: Path
) -> None:
    lobby, owner = "asks", "asks-owner@example.com"
    tokens = hosted_broker.seed_lobby(lobby, owner, ("backend", "lead"))
    base = hosted_broker.lobby_url(lobby)
    device = Device()
    page.context.grant_permissions(["notifications"], origin=base)
    endpoint_prefix = push_service.endpoint("asks-")
    page.add_init_script(
        FAKE_PUSH_SERVICE % (json.dumps(device.subscription("")["keys"]), endpoint_prefix)
    )
    sign_in_through_lobby(page, hosted_broker, lobby, owner, "/")
    card = page.locator("#notifications")
    with page.expect_response(lambda r: r.url.endswith("/push/subscriptions")) as posted:
        card.get_by_role("button", name="Turn on notifications on this device").click()
    assert posted.value.status == 201

    session = AgentSession(
        tmp_path, hosted_broker.broker.url, tokens["backend"], lobby, "backend"
    ).start()
    try:
        # backend asks through its bridge; lead through the shell command.
        asked = session.call(
            "send_message",
            to="owner",
            content="Should the login page use SSO?",
            kind="question",
            client_request_id="ask-sso",
        )
        by_bridge = asked["message_id"]
        lead_config = _shell_config(hosted_broker, tmp_path, lobby, tokens["lead"])
        sent = _pocolobby(
            hosted_broker,
            "msg",
            "send",
            "owner",
            "May I drop the old API on Friday?",
            "--kind",
            "question",
            "--json",
            "--config",
            str(lead_config),
        )
        assert sent.returncode == 0, sent.stderr
        by_shell = json.loads(sent.stdout)["message_id"]

        # Both wait: the dashboard, the lobby list's count, `pocolobby status`.
        page.goto(f"{base}/")
        waiting = page.locator("#waiting")
        backend_item = waiting.locator(f'[data-question="{by_bridge}"]')
        lead_item = waiting.locator(f'[data-question="{by_shell}"]')
        expect(backend_item).to_contain_text("Should the login page use SSO?")
        expect(lead_item).to_contain_text("May I drop the old API on Friday?")
        assert _waiting_count(page, hosted_broker, lobby) == "2"
        status = _pocolobby(hosted_broker, "status", lobby)
        assert status.returncode == 0, status.stderr
        assert f"backend asks you (question, message {by_bridge}" in status.stdout
        assert f"lead asks you (question, message {by_shell}" in status.stdout

        # A push for each reached the subscribed device, naming the sender, not the words.
        payloads = [device.decrypt(r.body) for r in _pushes(push_service, endpoint_prefix, 2)]
        assert {(p["agent"], p["body"]) for p in payloads} == {
            ("backend", f"asks you a question (message {by_bridge})"),
            ("lead", f"asks you a question (message {by_shell})"),
        }
        assert "SSO" not in json.dumps(payloads)

        # The owner answers backend from the dashboard.
        page.goto(f"{base}/")
        backend_item.get_by_text("Answer backend").click()
        backend_item.get_by_label("Message to backend, as the owner").fill("Yes: use SSO.")
        backend_item.get_by_role("button", name="Send").click()
        answered = waiting.locator(f'[data-question="{by_bridge}"][data-answered]')
        expect(answered).to_contain_text("answered")
        expect(answered).to_contain_text("Yes: use SSO.")
        expect(
            waiting.locator(f'[data-question="{by_bridge}"]:not([data-answered])')
        ).to_have_count(0)
        expect(lead_item).to_be_visible()
        _screenshots(page, "owner-questions--waiting-and-answered")

        event = session.event_from("owner")
        (reply,) = event.payload["messages"]
        assert (reply["content"], reply["reply_to"], reply["from_owner"]) == (
            "Yes: use SSO.",
            by_bridge,
            True,
        )
        assert _waiting_count(page, hosted_broker, lobby) == "1"

        # The owner answers lead from the Messages page.
        page.goto(f"{base}/messages")
        line = page.locator(f'li.message[data-message="{by_shell}"]')
        expect(line.locator("[data-question-to-owner]")).to_have_text("question to you")
        line.get_by_text("Answer lead").click()
        line.get_by_label("Message to lead, as the owner").fill("Not before the 1st.")
        line.screenshot(path=str(ARTIFACTS / "owner-questions--messages-page--phone-light.png"))
        line.get_by_role("button", name="Send").click()
        expect(line.locator("[data-answered]")).to_contain_text("answered")
        inbox = _pocolobby(hosted_broker, "msg", "inbox", "--json", "--config", str(lead_config))
        assert inbox.returncode == 0, inbox.stderr
        replies = [m for m in json.loads(inbox.stdout)["messages"] if m["from"] == "owner"]
        assert [(m["content"], m["reply_to"]) for m in replies] == [
            ("Not before the 1st.", by_shell)
        ]

        # Both show answered; nothing waits any more.
        page.goto(f"{base}/")
        expect(waiting.locator("[data-answered]")).to_have_count(2)
        expect(waiting.locator("[data-question]:not([data-answered])")).to_have_count(0)
        _screenshots(page, "owner-questions--all-answered")
        assert _waiting_count(page, hosted_broker, lobby) is None
        status = _pocolobby(hosted_broker, "status", lobby)
        assert "asks you" not in status.stdout
    finally:
        session.close()
