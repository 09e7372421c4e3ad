"""A hosted broker behind Debian's Caddy, run from docs/OPERATIONS.md's one-machine
Caddyfile with its internal CA: an owner signs in with Chromium through it, a real bridge
connects over https/wss, and the sign-in limits see the real client through the one trusted
hop."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.bridge.host import Host
from tests.deploy.caddy import trust_store
from tests.deploy.conftest import Deployment, bridge_env, write_bridge_config
from tests.server import REPO_ROOT

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO_ROOT / "test-artifacts" / "screenshots"


@pytest.mark.usefixtures("loopback_names")
def test_an_owner_signs_in_through_caddy_and_the_dashboard_stays_live(
    deployment: Deployment, tmp_path: Path
):
    for tool, package in ((CHROMIUM, "chromium"), ("certutil", "libnss3-tools")):
        if shutil.which(tool) is None:
            message = f"{tool} is missing: apt-get install {package}"
            if os.environ.get("POCOLOBBY_REQUIRE_CADDY") == "1":
                pytest.fail(message)
            pytest.skip(message)
    lobby, owner = "harbour", "owner@example.com"
    deployment.admin("POST", "/lobbies", {"name": lobby})
    deployment.admin("POST", "/accounts", {"email": owner})
    deployment.admin("PUT", f"/lobbies/{lobby}/owner", {"email": owner})
    token = deployment.admin("POST", f"/lobbies/{lobby}/agents", {"agent_id": "lead"})["token"]
    trust_store(tmp_path, deployment.caddy.root_cert)
    lobby_url = deployment.lobby_url(lobby)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, env={"HOME": str(tmp_path)})
        try:
            page = browser.new_page()
            started = time.monotonic()
            page.goto(f"{lobby_url}/")
            page.get_by_role("link", name="Sign in with your email").click()
            page.wait_for_url(re.compile(rf"^{re.escape(deployment.console_url)}/sign-in.*"))
            page.wait_for_load_state()
            page.locator("input[name=email]").fill(owner)
            page.get_by_role("button", name="Send me a code").click()
            page.wait_for_url(re.compile(r".*/sign-in/code.*"))
            page.wait_for_load_state()
            page.locator("input[name=code]").fill(deployment.postmark.latest_code(owner))
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{lobby_url}/")
            expect(page.locator("#agents")).to_contain_text("lead")
            signed_in = time.monotonic() - started
            (mail,) = deployment.postmark.sent_to(owner)
            assert mail.sender == "codes@pocolobby.test" and "sign-in code" in mail.subject

            # The live parts refresh through Caddy: a request the agent makes now shows up.
            line = f"approve the release {uuid.uuid4().hex[:6]}"
            with deployment.client() as client:
                response = client.post(
                    f"{deployment.api_url}/v1/me/owner-requests",
                    json={"count": 1, "line": line},
                    headers={"Authorization": f"Bearer {token}"},
                )
            with page.expect_response(re.compile(r".*/parts/waiting$"), timeout=15000) as part:
                pass
            assert part.value.status == 200 and part.value.url.startswith("https://")
            expect(page.locator("#waiting")).to_contain_text(line, timeout=15000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "deploy-caddy--dashboard.png"), full_page=True)
        finally:
            browser.close()
    assert response.status_code < 300, response.text
    print(f"sign-in to dashboard through Caddy: {signed_in:.2f}s")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def push_latencies(
    host: Host, client: httpx.AsyncClient, url: str, token: str, to: str, count: int
) -> list[float]:
    """Seconds from each send's start to its channel event at the host, one at a time."""
    seconds = []
    for i in range(count):
        began = time.perf_counter()
        response = await client.post(
            f"{url}/v1/messages",
            json={"to": to, "content": f"ping {i}", "client_request_id": f"{to}-{i}"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code < 300, response.text
        event = await host.message_event(response.json()["message_id"])
        seconds.append(event.at - began)
    return seconds


@pytest.mark.asyncio
@pytest.mark.usefixtures("loopback_names")
async def test_a_bridge_gets_its_bootstrap_and_pushes_over_https_and_wss_with_the_proxys_ca(
    deployment: Deployment, tmp_path: Path
):
    lobby = "wharf"
    await asyncio.to_thread(deployment.admin, "POST", "/lobbies", {"name": lobby})
    tokens = {
        name: (
            await asyncio.to_thread(
                deployment.admin, "POST", f"/lobbies/{lobby}/agents", {"agent_id": name}
            )
        )["token"]
        for name in ("alpha", "beta", "gamma")
    }
    proxied = write_bridge_config(
        deployment.api_url, lobby, "beta", tokens["beta"], tmp_path / "beta.json"
    )
    direct = write_bridge_config(
        deployment.broker.url, lobby, "gamma", tokens["gamma"], tmp_path / "gamma.json"
    )
    via_caddy = Host(
        proxied, str(uuid.uuid4()), tmp_path / "beta.log", extra_env=bridge_env(deployment.caddy)
    )
    straight = Host(direct, str(uuid.uuid4()), tmp_path / "gamma.log")
    await via_caddy.start()
    await straight.start()
    try:
        bootstrap = await via_caddy.bootstrap()
        assert bootstrap.meta["agent_id"] == "beta" and bootstrap.meta["scope"] == "bootstrap"
        context = await via_caddy.ok("get_context")
        assert context["bridge"]["connection"] == "connected"
        await straight.bootstrap()
        async with deployment.async_client() as through, httpx.AsyncClient(timeout=10) as plain:
            proxy = await push_latencies(
                via_caddy, through, deployment.api_url, tokens["alpha"], "beta", 40
            )
            local = await push_latencies(
                straight, plain, deployment.broker.url, tokens["alpha"], "gamma", 40
            )
        inbox = await via_caddy.ok("get_messages")
        assert len(inbox["messages"]) == 40
    finally:  # anyio's scopes close in the reverse order of their start
        await straight.close()
        assert await via_caddy.close() == 0
    print(
        "push latency through Caddy p50 {:.1f} ms p99 {:.1f} ms; direct p50 {:.1f} ms "
        "p99 {:.1f} ms".format(
            *(1000 * percentile(v, q) for v in (proxy, local) for q in (0.5, 0.99))
        )
    )


@pytest.mark.usefixtures("loopback_names")
def test_the_sign_in_limits_count_the_real_client_and_a_forged_forwarded_for_changes_nothing(
    deployment: Deployment,
):
    address = "limits@example.com"
    deployment.admin("POST", "/accounts", {"email": address})

    def ask(source: str, email: str, forged: str = "") -> httpx.Response:
        headers = {"Origin": deployment.console_url}
        if forged:
            headers["X-Forwarded-For"] = forged
        with deployment.client(local_address=source) as client:
            return client.post(
                f"{deployment.console_url}/sign-in", json={"email": email}, headers=headers
            )

    assert ask("127.0.0.2", address).status_code == 200
    assert len(deployment.postmark.sent_to(address)) == 1
    # Per address, whatever the network: another client is refused within the minute too.
    again = ask("127.0.0.3", address)
    assert again.status_code == 429 and "less than a minute ago" in again.text
    # Per network, 20 code requests an hour: 127.0.0.2 spends them (unknown addresses count
    # alike), and claiming to be someone else does not escape them.
    for n in range(19):
        assert ask("127.0.0.2", f"other{n}@example.com").status_code == 200
    forged = ask("127.0.0.2", "late@example.com", forged="203.0.113.7")
    assert forged.status_code == 429 and "from your network" in forged.text, forged.text
    # Another client (Caddy connects from 127.0.0.1 for both): counted on its own.
    assert ask("127.0.0.3", "late@example.com").status_code == 200
