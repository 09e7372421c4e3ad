"""Console test helpers: hosted settings, browsers as one test client per host, JSON posts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from console import local
from console.actions.accounts import save_account
from console.models import Account

DOMAIN = "pocolobby.test"
ACCOUNT_HOST = DOMAIN
LOCAL_HOST = "127.0.0.1:8787"


@pytest.fixture(autouse=True)
def console_defaults(settings: Any) -> None:
    """No sign-in floor (one test shows it), locmem mail, no operator sessions left over."""
    settings.POCOLOBBY_SIGN_IN_FLOOR_SECONDS = 0
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    local.forget_all()


@pytest.fixture
def hosted(settings: Any) -> None:
    settings.POCOLOBBY_DOMAIN = DOMAIN
    settings.POCOLOBBY_API_HOSTS = frozenset({f"api.{DOMAIN}"})
    settings.POCOLOBBY_PUBLIC_SCHEME = "https"
    settings.ALLOWED_HOSTS = [DOMAIN, f".{DOMAIN}", "127.0.0.1"]


def lobby_host(name: str) -> str:
    return f"{name}.{DOMAIN}"


def origin_of(host: str) -> str:
    return f"http://{host}" if host == LOCAL_HOST else f"https://{host}"


def browser_at(host: str, **extra: Any) -> Client:
    """One host's view of a browser: Django's test client keeps cookies per client."""
    return Client(HTTP_HOST=host, secure=host != LOCAL_HOST, **extra)


def post_json(client: Client, path: str, data: Any, *, origin: str | None = None, **extra: Any):
    host = client.defaults["HTTP_HOST"]
    return client.post(
        path,
        data=json.dumps(data),
        content_type="application/json",
        HTTP_ORIGIN=origin if origin is not None else origin_of(host),
        **extra,
    )


def last_code(to: str) -> str:
    message = [m for m in mail.outbox if to in m.to][-1]
    found = re.search(r"\b(\d{6})\b", message.body)
    assert found, message.body
    return found.group(1)


def sign_in(client: Client, email: str, next_path: str = "") -> Any:
    """The whole email-code flow in the account area; returns the code POST's response."""
    body: dict[str, Any] = {"email": email}
    if next_path:
        body["next"] = next_path
    sent = post_json(client, "/sign-in", body)
    assert sent.status_code == 200, sent.content
    return post_json(client, "/sign-in/code", {**body, "code": last_code(email)})


@pytest.fixture
def make_account(db: None) -> Callable[..., Account]:
    def make(email: str, **fields: Any) -> Account:
        account, _ = save_account(email, **fields)
        return account

    return make
