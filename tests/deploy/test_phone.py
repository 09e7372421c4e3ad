"""One person's broker on a phone: a local broker with POCOLOBBY_PUBLIC_ORIGIN behind Debian's
Caddy, run from docs/OPERATIONS.md's one-name Caddyfile, standing in for Tailscale Serve or
Cloudflare Tunnel. `pocolobby settings --qr`'s link, opened in Chromium at phone width through
Caddy, signs the phone in; the Messages page is live; notifications turn on (the page's
service worker at the https origin, the subscription posted, a push decrypted at a loopback
push service stand-in); and requests that go around Caddy, or forge its headers, are refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.board.notifications.webpush_service import (
    FAKE_PUSH_SERVICE,
    Device,
    PushService,
    verify_vapid,
)
from tests.deploy.caddy import Caddy, doc_caddyfile, trust_store
from tests.server import REPO_ROOT, Broker, free_port

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ADMIN_TOKEN = "pla_phone-admin-token"
PHONE = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
    "device_scale_factor": 2,
}
ARTIFACTS = REPO_ROOT / "test-artifacts" / "screenshots"
QR_BLOCKS = set("\u2580\u2584\u2588 ")


@dataclass
class Pocket:
    """A local broker whose public origin is Caddy's one name."""

    broker: Broker
    caddy: Caddy
    push: PushService
    origin: str

    @property
    def public_host(self) -> str:
        return self.origin.split("://", 1)[1]

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = httpx.request(
            method,
            f"{self.broker.url}/v1/admin{path}",
            json=body,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=10,
        )
        assert response.status_code < 300, response.text
        return response.json()

    def agent_call(self, token: str, path: str, body: Any) -> Any:
        """An agent's call through Caddy: the API answers at the public origin too."""
        with httpx.Client(verify=self.caddy.ssl_context(), timeout=10) as client:
            response = client.post(
                f"{self.origin}/v1{path}", json=body, headers={"Authorization": f"Bearer {token}"}
            )
        assert response.status_code < 300, response.text
        return response.json()

    def straight(self, path: str, local_address: str, **headers: str) -> httpx.Response:
        """A request to the broker's own port, around Caddy, from `local_address`."""
        transport = httpx.HTTPTransport(local_address=local_address)
        with httpx.Client(transport=transport, timeout=10) as client:
            return client.get(f"{self.broker.url}{path}", headers=headers)


@pytest.fixture(scope="module")
def pocket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pocket]:
    for tool, package in ((CHROMIUM, "chromium"), ("certutil", "libnss3-tools")):
        if shutil.which(tool) is None:
            message = f"{tool} is missing: apt-get install {package}"
            if os.environ.get("POCOLOBBY_REQUIRE_CADDY") == "1":
                pytest.fail(message)
            pytest.skip(message)
    https_port, broker_port = free_port(), free_port()
    origin = f"https://phone.localhost:{https_port}"
    caddy = Caddy(
        doc_caddyfile(
            2, f"phone.localhost:{https_port}", {"127.0.0.1:8787": f"127.0.0.1:{broker_port}"}
        ),
        tmp_path_factory.mktemp("phone-caddy"),
        server_name="phone.localhost",
        https_port=https_port,
        http_port=free_port(),
    )
    with PushService() as push:
        broker = Broker(
            tmp_path_factory.mktemp("phone-broker"),
            port=broker_port,
            env={
                "POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN,
                "POCOLOBBY_PUBLIC_ORIGIN": origin,
                # Caddy connects from 127.0.0.1; the test's stray clients use 127.0.0.2.
                "POCOLOBBY_TRUSTED_PROXIES": "127.0.0.1",
                "POCOLOBBY_PUSH_ENDPOINT_ALLOW": push.host_port,
                "REQUESTS_CA_BUNDLE": str(push.ca),
            },
        )
        try:
            broker.start()
            caddy.start()
            yield Pocket(broker, caddy, push, origin)
        finally:
            caddy.stop()
            broker.stop()


def phone_link(pocket: Pocket) -> str:
    """`pocolobby settings --qr` as the person runs it: the link, also as a QR code."""
    result = pocket.broker.cli("settings", "--qr", env={"POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    link = lines[-1]
    assert link.startswith(f"{pocket.origin}/#ticket="), result.stdout
    drawn = [line for line in lines if line and set(line) <= QR_BLOCKS]
    assert len(drawn) >= 15 and len({len(line) for line in drawn}) == 1, result.stdout
    return link


@pytest.mark.usefixtures("loopback_names")
def test_the_phone_signs_in_through_the_proxy_and_the_pages_are_live_and_push_works(
    pocket: Pocket, tmp_path: Path
) -> None:
    lobby = "pocket"
    pocket.admin("POST", "/lobbies", {"name": lobby})
    tokens = {
        name: pocket.admin("POST", f"/lobbies/{lobby}/agents", {"agent_id": name})["token"]
        for name in ("lead", "api")
    }
    link = phone_link(pocket)
    trust_store(tmp_path, pocket.caddy.root_cert)
    device = Device()
    keys = device.subscription("")["keys"]
    stand_in = pocket.push.endpoint("phone-")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, env={"HOME": str(tmp_path)})
        try:
            context = browser.new_context(**PHONE)  # type: ignore[arg-type]
            context.grant_permissions(["notifications"], origin=pocket.origin)
            context.add_init_script(FAKE_PUSH_SERVICE % (json.dumps(keys), stand_in))
            page = context.new_page()
            page.goto(link)
            # The page posts the fragment's ticket back and lands on the operator's home.
            expect(page.get_by_role("link", name=lobby, exact=True)).to_be_visible()
            assert page.url == f"{pocket.origin}/"
            [cookie] = [c for c in context.cookies() if c["name"] == "__Host-pocolobby-operator"]
            assert cookie["secure"] and cookie["domain"] == "phone.localhost"

            # The Messages page refreshes itself: an agent's message shows without a reload.
            page.goto(f"{pocket.origin}/{lobby}/messages")
            line = f"the build is green {uuid.uuid4().hex[:6]}"
            pocket.agent_call(
                tokens["lead"],
                "/messages",
                {"to": "api", "content": line, "client_request_id": uuid.uuid4().hex},
            )
            with page.expect_response(re.compile(r".*/parts/messages"), timeout=15000) as part:
                pass
            assert part.value.status == 200 and part.value.url.startswith(pocket.origin)
            expect(page.locator("main")).to_contain_text(line, timeout=15000)

            # Notifications on this device: the worker registers at the https origin.
            page.goto(f"{pocket.origin}/{lobby}/")
            card = page.locator("#notifications")
            with page.expect_response(lambda r: r.url.endswith("/push/subscriptions")) as posted:
                card.get_by_role("button", name="Turn on notifications on this device").click()
            assert posted.value.status == 201
            expect(card.locator("[data-push-state]")).to_contain_text("on for this device")
            scope = page.evaluate(
                f"navigator.serviceWorker.getRegistration('/{lobby}/').then(r => r && r.scope)"
            )
            assert scope == f"{pocket.origin}/{lobby}/"
            public_key = page.evaluate(
                f"fetch('/{lobby}/push/key').then(r => r.json()).then(j => j.public_key)"
            )
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "deploy-phone--dashboard.png"), full_page=True)
            cookie_value = cookie["value"]
        finally:
            browser.close()

    # An agent asks the owner: the broker's serve loop pushes it to the phone's subscription.
    pocket.agent_call(tokens["lead"], "/me/owner-requests", {"count": 1, "line": "Ship it?"})
    pocket.push.wait_for(
        lambda: any(r.path.startswith("/push/phone-") for r in pocket.push.received)
    )
    pushed = [r for r in pocket.push.received if r.path.startswith("/push/phone-")]
    assert device.decrypt(pushed[-1].body)["title"] == f"{lobby}: lead waits on you"
    claims = verify_vapid(pushed[-1].headers["authorization"], public_key, pocket.push.origin)
    assert claims["sub"] == "https://phone.localhost"  # the public name (py_vapid takes no port)

    # Around Caddy, with the phone's own cookie: the public name is not served.
    cookie_header = {"Cookie": f"__Host-pocolobby-operator={cookie_value}"}
    for peer in ("127.0.0.1", "127.0.0.2"):
        around = pocket.straight(f"/{lobby}/", peer, Host=pocket.public_host, **cookie_header)
        assert around.status_code == 403, around.text
        assert "only through its https proxy" in around.text and "lead" not in around.text
    # Caddy's headers, forged by a peer that is not Caddy: refused, whatever the Host.
    forged = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    for host in (pocket.public_host, f"127.0.0.1:{pocket.broker.port}"):
        claimed = pocket.straight(f"/{lobby}/", "127.0.0.2", Host=host, **forged, **cookie_header)
        assert claimed.status_code == 403, claimed.text
        assert "not this broker's proxy" in claimed.text and "lead" not in claimed.text
    # Through Caddy, the same cookie still opens the dashboard (the refusals were the path).
    with httpx.Client(verify=pocket.caddy.ssl_context(), timeout=10) as client:
        through = client.get(f"{pocket.origin}/{lobby}/", headers=cookie_header)
        assert through.status_code == 200 and "lead" in through.text
        # The hosted layout's page rules hold here too: a nonce'd CSP, no framing.
        policy = through.headers["content-security-policy"]
        assert "script-src 'self' 'nonce-" in policy and "frame-ancestors 'none'" in policy
        # A name pointed at this machine (DNS rebinding) reaches nothing at the broker.
    rebound = pocket.straight(f"/{lobby}/", "127.0.0.1", Host=f"evil.example:{pocket.broker.port}")
    assert rebound.status_code == 400 and "lead" not in rebound.text

    # The Django admin's own forms pass Django's CSRF check at the https origin: its log out
    # ends the phone's session.
    with httpx.Client(
        verify=pocket.caddy.ssl_context(),
        timeout=10,
        cookies={"__Host-pocolobby-operator": cookie_value},
    ) as client:
        admin = client.get(f"{pocket.origin}/admin/")
        assert admin.status_code == 200 and "local-operator" in admin.text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', admin.text)
        assert token is not None, admin.text
        out = client.post(
            f"{pocket.origin}/admin/logout/",
            data={"csrfmiddlewaretoken": token.group(1)},
            headers={"Origin": pocket.origin},
        )
        assert out.status_code == 200, out.text
        assert client.get(f"{pocket.origin}/{lobby}/settings").status_code == 403
