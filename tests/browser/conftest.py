"""Browser tests: Debian's Chromium driven by Playwright against a real broker subprocess.

The broker runs hosted on `pocolobby.localhost:<port>`: Chromium resolves every
`*.localhost` name to loopback and treats it as a secure context, so each lobby gets its own
host and its own `__Host-` cookies over plain HTTP, as it would on a real domain with TLS.
Mail goes to Django's file backend in the broker's data directory, where a test reads the code.
Screenshots are kept under test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from playwright.sync_api import Browser, BrowserType, Page, Playwright, sync_playwright

from tests.board.notifications.webpush_service import (
    FAKE_PUSH_SERVICE,
    Device,
    PushService,
    Received,
)
from tests.eventually import eventually
from tests.server import Broker, admin, free_port

CHROMIUM = "/usr/bin/chromium"
ADMIN_TOKEN = "pla_browser-admin-token"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

# Desktop and phone width, light and dark: every browser test runs in each.
LOOKS = {
    "desktop-light": {"viewport": {"width": 1280, "height": 900}, "color_scheme": "light"},
    "desktop-dark": {"viewport": {"width": 1280, "height": 900}, "color_scheme": "dark"},
    "phone-light": {
        "viewport": {"width": 390, "height": 844},
        "color_scheme": "light",
        "is_mobile": True,
        "has_touch": True,
        "device_scale_factor": 2,
    },
    "phone-dark": {
        "viewport": {"width": 390, "height": 844},
        "color_scheme": "dark",
        "is_mobile": True,
        "has_touch": True,
        "device_scale_factor": 2,
    },
}


@pytest.fixture(scope="session", autouse=True)
def _chromium_present() -> None:
    """Without Debian's chromium these tests cannot run: skipped, loudly, except in CI
    (.ci/run installs it and sets POCOLOBBY_REQUIRE_BROWSER=1, so there it fails).
    Session-scoped, so it runs before pytest-playwright's session `browser` tries a launch."""
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)"
        if os.environ.get("POCOLOBBY_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class HostedBroker:
    broker: Broker
    domain: str
    mail_dir: Path

    @property
    def account_url(self) -> str:
        return f"http://{self.domain}"

    def lobby_url(self, lobby: str) -> str:
        return f"http://{lobby}.{self.domain}"

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return admin(self.broker.url, ADMIN_TOKEN, method, path, body)

    def agent_call(self, token: str, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(
            method,
            f"{self.broker.url}/v1{path}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert response.status_code < 300, response.text
        return response.json()

    def seed_lobby(
        self, lobby: str, owner: str, agents: tuple[str, ...], viewer: str = ""
    ) -> dict[str, str]:
        """A lobby with its owner's account (and a viewer's, if named) and these agents;
        their tokens by name."""
        self.admin("POST", "/lobbies", {"name": lobby})
        self.admin("POST", "/accounts", {"email": owner})
        self.admin("PUT", f"/lobbies/{lobby}/owner", {"email": owner})
        if viewer:
            self.admin("POST", "/accounts", {"email": viewer})
        return {
            name: self.admin("POST", f"/lobbies/{lobby}/agents", {"agent_id": name})["token"]
            for name in agents
        }

    def latest_code(self, address: str, timeout: float = 10.0) -> str:
        """The newest six-digit code mailed to `address`."""

        def newest() -> str:
            found = ""
            for path in sorted(self.mail_dir.glob("*.log"), key=lambda p: p.stat().st_mtime):
                for message in path.read_text(errors="replace").split("-" * 79):
                    if f"To: {address}" in message:
                        match = re.search(r"\b(\d{6})\b", message.split("\n\n", 1)[-1])
                        if match:
                            found = match.group(1)
            return found

        return eventually(newest, timeout=timeout, what=f"a code mailed to {address}")


@pytest.fixture(scope="session")
def hosted_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostedBroker]:
    yield from run_hosted_broker(tmp_path_factory)


def run_hosted_broker(
    tmp_path_factory: pytest.TempPathFactory, **extra_env: str
) -> Iterator[HostedBroker]:
    """A hosted broker for the tests that use it, stopped after them."""
    port = free_port()
    data_dir = tmp_path_factory.mktemp("browser-broker")
    domain = f"pocolobby.localhost:{port}"
    mail_dir = data_dir / "mail"
    broker = Broker(
        data_dir,
        port=port,
        env={
            "POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN,
            "POCOLOBBY_DOMAIN": domain,
            "POCOLOBBY_PUBLIC_SCHEME": "http",
            # The test process reaches the API at 127.0.0.1; browsers never do.
            "POCOLOBBY_API_HOSTS": f"127.0.0.1:{port}",
            "POCOLOBBY_EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "POCOLOBBY_EMAIL_FILE_PATH": str(mail_dir),
            "POCOLOBBY_SIGN_IN_FLOOR_SECONDS": "0",
            **extra_env,
        },
    ).start()
    yield HostedBroker(broker, domain, mail_dir)
    broker.stop()


@pytest.fixture(scope="module")
def push_service() -> Iterator[PushService]:
    """The loopback stand-in for a browser's push service
    (tests/board/notifications/webpush_service.py)."""
    with PushService() as running:
        yield running


@pytest.fixture(scope="module")
def push_broker(
    tmp_path_factory: pytest.TempPathFactory, push_service: PushService
) -> Iterator[HostedBroker]:
    """A hosted broker that may push to the stand-in and trusts its certificate."""
    yield from run_hosted_broker(
        tmp_path_factory,
        POCOLOBBY_PUSH_ENDPOINT_ALLOW=push_service.host_port,
        REQUESTS_CA_BUNDLE=str(push_service.ca),
    )


@dataclass
class PushDevice:
    """This browser as a device that can be pushed to: `PushManager.subscribe` answers with a
    subscription at the stand-in under `endpoint` and this device's keys (headless Chromium
    has no push service of its own)."""

    device: Device
    service: PushService
    endpoint: str

    def pushes(self, count: int = 1, timeout: float = 20.0) -> list[Received]:
        """The pushes that reached the stand-in for this device, once there are `count`."""
        path = self.endpoint.split("/push/", 1)[1]
        return eventually(
            lambda: (
                mine
                if len(
                    mine := [r for r in self.service.received if r.path.startswith(f"/push/{path}")]
                )
                >= count
                else None
            ),
            timeout=timeout,
            every=0.2,
            what=f"{count} pushes reaching the stand-in at {self.endpoint}",
        )


@pytest.fixture
def push_device(
    page: Page, push_service: PushService, push_broker: HostedBroker, request: pytest.FixtureRequest
) -> PushDevice:
    """The page's browser made a device with notifications allowed on every lobby of
    `push_broker`, subscribing at the stand-in under an endpoint named for the test."""
    device = Device()
    endpoint = push_service.endpoint(re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()) + "-")
    page.context.grant_permissions(["notifications"])
    page.add_init_script(
        FAKE_PUSH_SERVICE % (json.dumps(device.subscription("")["keys"]), endpoint)
    )
    return PushDevice(device, push_service, endpoint)


# pytest-playwright starts one sync Playwright for the whole session; while it runs, its event
# loop is the running loop of this thread, so every later test in the same process (a
# pytest-xdist worker runs other folders after this one) finds "a running event loop": Django
# refuses database calls and pytest-asyncio cannot start its own. Scoped to the module here,
# Playwright stops after each browser module, and its loop ends with it.
@pytest.fixture(scope="module")
def playwright(_pw_api_request_contexts: Any) -> Iterator[Playwright]:
    started = sync_playwright().start()
    if _pw_api_request_contexts:
        _pw_api_request_contexts.instrument(started)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return cast(BrowserType, getattr(playwright, browser_name))


@pytest.fixture(scope="module")
def launch_browser(
    browser_type_launch_args: dict[str, Any], browser_type: BrowserType
) -> Callable[..., Browser]:
    def launch(**options: Any) -> Browser:
        return browser_type.launch(**{**browser_type_launch_args, **options})

    return launch


@pytest.fixture(scope="module")
def browser(launch_browser: Callable[..., Browser]) -> Iterator[Browser]:
    launched = launch_browser()
    yield launched
    launched.close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": CHROMIUM}


@pytest.fixture(params=list(LOOKS))
def look(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def browser_context_args(look: str) -> dict[str, Any]:
    """The look alone: pytest-playwright's own reads `--device`, `--base-url` and `--video`
    (none of which these tests use) through a session-scoped Playwright."""
    return dict(LOOKS[look])


@pytest.fixture
def shoot(look: str, request: pytest.FixtureRequest) -> Any:
    """Save a full-page screenshot named after the test, the step and the look."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    test = re.sub(r"\W+", "-", request.node.originalname)

    def save(browser_page: Any, step: str) -> Path:
        path = ARTIFACTS / f"{test}--{step}--{look}.png"
        browser_page.screenshot(path=str(path), full_page=True)
        return path

    return save


def enter_emailed_code(browser_page: Any, hosted: HostedBroker, email: str) -> None:
    """On the sign-in page: ask for a code, read it from the mail, enter it."""
    browser_page.wait_for_load_state()
    browser_page.locator("input[name=email]").fill(email)
    browser_page.get_by_role("button", name="Send me a code").click()
    browser_page.wait_for_url(re.compile(r".*/sign-in/code.*"))
    browser_page.wait_for_load_state()
    browser_page.locator("input[name=code]").fill(hosted.latest_code(email))
    browser_page.get_by_role("button", name="Sign in").click()


def sign_in_through_lobby(
    browser_page: Any, hosted: HostedBroker, lobby: str, email: str, path: str = "/"
) -> None:
    """From the lobby's host to the account area, an emailed code, and the hand-off back."""
    lobby_url = hosted.lobby_url(lobby)
    browser_page.goto(f"{lobby_url}{path}")
    browser_page.get_by_role("link", name="Sign in with your email").click()
    browser_page.wait_for_url(re.compile(rf"^{re.escape(hosted.account_url)}/sign-in.*"))
    enter_emailed_code(browser_page, hosted, email)
    browser_page.wait_for_url(f"{lobby_url}{path}")
    browser_page.wait_for_load_state()
