"""Text holding NUL (U+0000) is refused with `400 invalid_text` wherever it arrives on /v1: a
path, a query string, an argument, an argument's key deep in an object. PostgreSQL's text
cannot hold a NUL (the request was a 500 there) and SQLite stored it; one rule for both, and
nothing is stored. (The PostgreSQL pass runs this module on PostgreSQL; the last test runs a
real broker on a PostgreSQL database of its own in every pass.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.test import Client

from lobbies.models import Agent, Message
from tests.conftest import AgentClient
from tests.postgres import own_database, url
from tests.server import Broker

ADMIN = {"HTTP_AUTHORIZATION": "Bearer pla_test-admin-token"}


def _refused(response: httpx.Response | object, where: str) -> None:
    status = getattr(response, "status_code")  # noqa: B009 (Django's and httpx's answers)
    body = response.json()  # type: ignore[attr-defined]
    assert (status, body["error"]["code"]) == (400, "invalid_text"), body
    assert where in body["error"]["message"] and "NUL" in body["error"]["message"], body


def test_a_nul_in_an_admin_path_is_refused_naming_the_path(lobby):
    _refused(Client().get("/v1/admin/lobbies/%00/agents", **ADMIN), "the path")
    _refused(Client().get("/v1/admin/lobbies/my-team%00/agents", **ADMIN), "the path")


def test_a_nul_in_a_query_parameter_is_refused_naming_it(backend: AgentClient):
    answer = backend.client.get(
        "/v1/messages?query=a%00b", HTTP_AUTHORIZATION=f"Bearer {backend.token}"
    )
    _refused(answer, "the query parameter 'query'")


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"content": "hello\u0000there"}, "argument 'content'"),
        ({"content": "hi", "fields": {"note": "a\u0000"}}, "argument 'fields.note'"),
        ({"content": "hi", "fields": {"a\u0000b": "x"}}, "argument 'fields'"),
        ({"content": "hi", "client_request_id": "r\u0000"}, "argument 'client_request_id'"),
    ],
)
def test_a_nul_in_a_sent_message_is_refused_and_nothing_is_stored(
    lead: AgentClient, backend: AgentClient, arguments: dict[str, object], where: str
):
    status, body = lead.call(
        "send_message", **{"to": "backend", "client_request_id": "r-1", **arguments}
    )
    assert (status, body["error"]["code"]) == (400, "invalid_text"), body
    assert where in body["error"]["message"]
    assert not Message.objects.exists()


def test_a_nul_escaped_in_utf16_json_is_refused_too(lead: AgentClient, backend: AgentClient):
    body = json.dumps({"to": "backend", "content": "a\u0000", "client_request_id": "r"})
    answer = lead.client.post(
        "/v1/tools/send_message",
        data=body.encode("utf-16"),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {lead.token}",
    )
    _refused(answer, "argument 'content'")
    assert not Message.objects.exists()


def test_a_nul_in_an_agents_description_is_refused(lobby):
    answer = Client().post(
        "/v1/admin/lobbies/my-team/agents",
        data=json.dumps({"agent_id": "backend", "description": "API\u0000work"}),
        content_type="application/json",
        **ADMIN,
    )
    _refused(answer, "argument 'description'")
    assert not Agent.objects.exists()


@pytest.fixture
def pg_database() -> Iterator[str]:
    yield from own_database("pocolobby_nul")


@pytest.mark.slow
def test_a_broker_on_postgresql_answers_400_not_500_for_nul_in_a_path_or_a_body(
    pg_database: str, tmp_path: Path
):
    """The probe's 500s, over the fast lane of a real broker on real PostgreSQL."""
    broker = Broker(tmp_path / "broker", env={"DATABASE_URL": url(pg_database)}).start()
    try:
        configs = broker.provision("team", ["lead", "backend"], tmp_path / "configs")
        admin = {"Authorization": f"Bearer {broker.admin_token}"}
        _refused(httpx.get(f"{broker.url}/v1/admin/lobbies/%00/agents", headers=admin), "the path")
        sent = httpx.post(
            f"{broker.url}/v1/tools/send_message",
            json={"to": "backend", "content": "a\u0000b", "client_request_id": "r-1"},
            headers=configs["lead"].headers,
        )
        _refused(sent, "argument 'content'")
        added = httpx.post(
            f"{broker.url}/v1/admin/lobbies/team/agents",
            json={"agent_id": "qa", "description": "\u0000"},
            headers=admin,
        )
        _refused(added, "argument 'description'")
        clean = httpx.post(
            f"{broker.url}/v1/tools/send_message",
            json={"to": "backend", "content": "fine", "client_request_id": "r-1"},
            headers=configs["lead"].headers,
        )
        assert clean.status_code == 200 and clean.json()["status"] == "stored"
        assert "Traceback" not in broker.log_text()
    finally:
        broker.stop()
