"""The ASGI app serves /v1 straight from the resolver: same answers, same Host check."""

from __future__ import annotations

import httpx
import pytest

from pocolobby.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _client(host: str = "127.0.0.1") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url=f"http://{host}"
    )


async def test_a_send_through_the_asgi_app(lead, backend, monkeypatch):
    async def not_django(scope, receive, send):
        raise AssertionError(f"{scope['path']} went through Django, not the fast lane")

    http = application.application_mapping["http"]
    monkeypatch.setattr(http, "django", not_django)
    async with _client() as client:
        response = await client.post(
            "/v1/messages",
            headers={"Authorization": f"Bearer {lead.token}"},
            json={"to": "backend", "content": "hi", "client_request_id": "r1"},
        )
    assert response.status_code == 200 and response.json()["status"] == "stored"


async def test_a_foreign_host_is_refused_as_json(lead):
    async with _client("evil.example") as client:
        response = await client.get("/v1/agents", headers={"Authorization": f"Bearer {lead.token}"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"


async def test_unknown_routes_and_origins_still_get_json(lead):
    async with _client() as client:
        missing = await client.get("/v1/nothing")
        origin = await client.post(
            "/v1/messages",
            headers={"Authorization": f"Bearer {lead.token}", "Origin": "https://x.example"},
            json={},
        )
        home = await client.get("/")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert origin.status_code == 403 and origin.json()["error"]["code"] == "origin_refused"
    # Pages answer only at the loopback address and port (DNS rebinding refused).
    assert home.status_code == 400 and "127.0.0.1:8787" in home.text


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/nothing"], ids=["fast-lane", "django"])
async def test_an_oversized_body_is_413_whoever_would_answer_the_route(lead, path):
    async with _client() as client:
        response = await client.post(
            path, headers={"Authorization": f"Bearer {lead.token}"}, content=b"x" * 300_000
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
