"""A hosted broker subprocess for the console's tests over a real server: its account area at
DOMAIN, lobbies under it, the API at its loopback address, sign-in codes mailed as files, and
clients that connect from any 127.x source address (each stands for its own network).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import DOMAIN
from tests.server import Broker, admin, free_port, with_empty_store

ADMIN_TOKEN = "pla_console-server-tests"
SIGN_IN_COOKIE = "__Host-pocolobby-sign-in"


@dataclass(frozen=True)
class HostedServer:
    broker: Broker
    mail_dir: Path

    def client(self, host: str = DOMAIN, source: str | None = None) -> httpx.Client:
        """A browser-like client of `host`'s pages, connecting from `source`."""
        return httpx.Client(
            transport=httpx.HTTPTransport(local_address=source),
            base_url=self.broker.url,
            headers={"Host": host, "Origin": f"http://{host}"},
            timeout=10,
        )

    def admin(self, method: str, path: str, body: dict[str, Any]) -> Any:
        return admin(self.broker.url, ADMIN_TOKEN, method, path, body)

    def mails_to(self, address: str) -> list[str]:
        """Every mail the broker wrote for `address` (Django's file backend: a file per
        connection, messages separated by a line of dashes)."""
        found = []
        for path in sorted(self.mail_dir.glob("*")):
            for message in path.read_text().split("-" * 79):
                if f"To: {address}" in message:
                    found.append(message)
        return found

    def code_for(self, address: str) -> str:
        (mail,) = self.mails_to(address)
        code = re.search(r"\b(\d{6})\b", mail.split("\n\n", 1)[-1])
        assert code, mail
        return code.group(1)


def sign_in_cookie(answer: httpx.Response) -> str:
    """The asking browser's sign-in cookie: a `__Host-` cookie, which httpx keeps for https
    only, so it is carried by hand over this plain-http loopback."""
    for line in answer.headers.get_list("set-cookie"):
        name, _, rest = line.partition("=")
        if name == SIGN_IN_COOKIE:
            return rest.split(";", 1)[0]
    raise AssertionError(f"no {SIGN_IN_COOKIE} cookie in {answer.headers}")


def start_hosted(folder: Path, **env: str) -> HostedServer:
    """A hosted broker in `folder` (its data and mail), with `env` added (DATABASE_URL: a
    PostgreSQL store, which the broker initialises)."""
    mail_dir, port = folder / "mail", free_port()
    data_dir = folder / "data"
    broker = Broker(
        data_dir if "DATABASE_URL" in env else with_empty_store(data_dir),
        port=port,
        env={
            "POCOLOBBY_ADMIN_TOKEN": ADMIN_TOKEN,
            "POCOLOBBY_DOMAIN": DOMAIN,
            "POCOLOBBY_API_HOSTS": f"127.0.0.1:{port}",
            "POCOLOBBY_PUBLIC_SCHEME": "http",
            "POCOLOBBY_EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "POCOLOBBY_EMAIL_FILE_PATH": str(mail_dir),
            "POCOLOBBY_SIGN_IN_FLOOR_SECONDS": "0",
            **env,
        },
    ).start()
    return HostedServer(broker, mail_dir)


@pytest.fixture
def hosted_server(tmp_path: Path) -> Iterator[HostedServer]:
    server = start_hosted(tmp_path)
    yield server
    server.broker.stop()
