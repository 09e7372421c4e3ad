"""Every page route, asked anything a browser or a script could send, answers without a
server error: junk bodies, wrong methods, wrong types, query strings, as each kind of
visitor. A refusal is a 4xx with a sentence; nothing is a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from console import local
from console.access import OPERATOR_COOKIE
from tests.conftest import AgentClient

LOCAL_HOST = "127.0.0.1:8787"
ORIGIN = f"http://{LOCAL_HOST}"

BODIES: list[tuple[str, bytes]] = [
    ("application/json", b""),
    ("application/json", b"null"),
    ("application/json", b"[1, 2]"),
    ("application/json", b'{"room": 7, "members": "lead"}'),
    ("application/json", b'{"email": ["a"], "code": {"x": 1}, "visibility": null}'),
    ("application/json", json.dumps({"x" * 40: "\u0000\ud800"}).encode()),
    ("application/json", b'{"room": "' + b"a" * 20_000 + b'"}'),
    ("application/json", b"{not json"),
    ("application/x-www-form-urlencoded", b"room=x&members=y"),
    ("text/plain", b"\xff\xfe\x00"),
    ("application/json", b"[" * 1024 + b"]" * 1024),
    ("application/json", b'{"room": ' + b"{" * 5000 + b"}" * 5000 + b"}"),
]


def _paths(urlconf: str) -> list[str]:
    found: list[str] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            route = str(entry.pattern)
            if route.startswith("admin/"):
                continue
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + route)
            elif isinstance(entry, URLPattern):
                found.append("/" + (prefix + route).replace("<str:lobby>", "team"))

    walk(get_resolver(urlconf).url_patterns, "")
    return found


def _operator() -> Client:
    client = Client(HTTP_HOST=LOCAL_HOST)
    client.cookies[f"__Host-{OPERATOR_COOKIE}"] = local.redeem_ticket(local.issue_ticket()) or ""
    return client


@pytest.mark.parametrize("signed_in", [True, False], ids=["operator", "stranger"])
def test_no_page_route_answers_with_a_server_error(lead: AgentClient, signed_in: bool) -> None:
    lobby = lead.agent.lobby.name
    client = _operator() if signed_in else Client(HTTP_HOST=LOCAL_HOST)
    paths = [p for p in _paths("console.urls")] + [f"/{lobby}{p}" for p in _paths("board.urls")]
    assert len(paths) > 20, paths
    failures = []
    for path in paths:
        if path.endswith("/settings/delete"):
            continue  # a junk body cannot name the lobby, but leave nothing to chance
        answers = [
            client.get(path),
            client.get(path, {"next": "//evil.example", "token": "x" * 500, "page": "-1"}),
            client.put(path, b"{}", content_type="application/json"),
        ]
        answers += [
            client.post(path, body, content_type=kind, HTTP_ORIGIN=ORIGIN) for kind, body in BODIES
        ]
        failures += [f"{path}: {a.status_code}" for a in answers if a.status_code >= 500]
    assert failures == []


@pytest.mark.parametrize("depth", [65, 300, 1024, 5000])
def test_a_form_nesting_too_deeply_is_refused_by_name_even_signed_out(db, depth: int) -> None:
    """Issue 28: /ticket (no sign-in needed) answered 500 with a logged traceback."""
    answer = Client(HTTP_HOST=LOCAL_HOST).post(
        "/ticket",
        b'{"ticket": ' + b"[" * depth + b"]" * depth + b"}",
        content_type="application/json",
        HTTP_ORIGIN=ORIGIN,
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "bad_json",
        "message": "the form nests JSON deeper than 64 levels",
    }
