"""Deployment tests: a hosted broker behind Debian's Caddy, run from docs/OPERATIONS.md's
Caddyfile with Caddy's internal CA, its names under `pocolobby.localhost`.

Without Caddy these tests are skipped, loudly, except where POCOLOBBY_REQUIRE_CADDY=1 (CI
installs it with `apt-get install caddy`), where they fail.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.caddy import LOOPBACK_NAMES, Caddy, PostmarkStandIn, caddy_path, doc_caddyfile
from tests.server import Broker, admin, free_port

ADMIN_TOKEN = "pla_deploy-admin-token"
POSTMARK_TOKEN = "postmark-server-token-for-tests"
MAIL_FROM = "codes@pocolobby.test"


@pytest.fixture(scope="session", autouse=True)
def _caddy_present() -> None:
    if caddy_path() is None:
        message = "caddy is missing: install Debian's caddy (apt-get install caddy)"
        if os.environ.get("POCOLOBBY_REQUIRE_CADDY") == "1":
            pytest.fail(message)
        pytest.skip(message)


_real_getaddrinfo = socket.getaddrinfo


def _loopback_for_localhost(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.lower().rstrip(".").endswith(".localhost"):
        host = "127.0.0.1"
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture
def loopback_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, `*.localhost` resolves to loopback, as Chromium does it (subprocesses
    get the same from tests/deploy/loopback_names/sitecustomize.py)."""
    monkeypatch.setattr(socket, "getaddrinfo", _loopback_for_localhost)


def bridge_env(caddy: Caddy) -> dict[str, str]:
    """What a bridge subprocess needs to reach the API through Caddy: its CA, and names."""
    return {"SSL_CERT_FILE": str(caddy.root_cert), "PYTHONPATH": str(LOOPBACK_NAMES)}


@dataclass
class Deployment:
    """Brokers behind one Caddy; names under `domain` (which carries Caddy's port)."""

    brokers: list[Broker]
    caddy: Caddy
    postmark: PostmarkStandIn
    domain: str

    @property
    def broker(self) -> Broker:
        return self.brokers[0]

    @property
    def console_url(self) -> str:
        return f"https://{self.domain}"

    @property
    def api_url(self) -> str:
        return f"https://api.{self.domain}"

    def lobby_url(self, lobby: str) -> str:
        return f"https://{lobby}.{self.domain}"

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The admin API, straight to a broker on loopback (the operator's side)."""
        broker = next(b for b in self.brokers if b.running)
        return admin(broker.url, ADMIN_TOKEN, method, path, body)

    def client(self, local_address: str | None = None) -> httpx.Client:
        """An HTTPS client through Caddy that trusts Caddy's root only, connecting from
        `local_address` (any 127.x address is this machine) when given."""
        transport = httpx.HTTPTransport(
            verify=self.caddy.ssl_context(), local_address=local_address
        )
        return httpx.Client(transport=transport, timeout=10)

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(verify=self.caddy.ssl_context(), timeout=10)


def hosted_env(domain: str, postmark: PostmarkStandIn, api_hosts: str) -> dict[str, str]:
    return {
        "POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN,
        "POCOLOBBY_DOMAIN": domain,
        # Caddy reaches the API at api.<domain>; the test's readiness check at 127.0.0.1.
        "POCOLOBBY_API_HOSTS": api_hosts,
        "POCOLOBBY_TRUSTED_PROXY_HOPS": "1",
        "POSTMARK_TOKEN": POSTMARK_TOKEN,
        "POCOLOBBY_MAIL_FROM": MAIL_FROM,
        "POCOLOBBY_POSTMARK_API_URL": postmark.url,
        "POCOLOBBY_SIGN_IN_FLOOR_SECONDS": "0",
    }


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One hosted broker (embedded SQLite) behind the one-machine Caddyfile."""
    postmark = PostmarkStandIn(POSTMARK_TOKEN).start()
    home = tmp_path_factory.mktemp("caddy")
    https_port, broker_port = free_port(), free_port()
    domain = f"pocolobby.localhost:{https_port}"
    caddy = Caddy(
        doc_caddyfile(0, domain, {"127.0.0.1:8787": f"127.0.0.1:{broker_port}"}),
        home,
        server_name="api.pocolobby.localhost",
        https_port=https_port,
        http_port=free_port(),
    )
    env = hosted_env(domain, postmark, f"api.{domain},127.0.0.1:{broker_port}")
    broker = Broker(tmp_path_factory.mktemp("deploy-broker"), port=broker_port, env=env)
    try:
        broker.start()
        caddy.start()
        yield Deployment([broker], caddy, postmark, domain)
    finally:
        caddy.stop()
        broker.stop()
        postmark.stop()


def write_bridge_config(url: str, lobby: str, agent: str, token: str, path: Path) -> Path:
    """An agent configuration as `agent add` writes it, naming `url`."""
    path.write_text(json.dumps({"url": url, "token": token, "lobby": lobby, "agent": agent}))
    path.chmod(0o600)
    return path
