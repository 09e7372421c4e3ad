"""The ASGI app serves /v1 straight from the resolver: same answers, same Host check."""

from __future__ import annotations

import json

import httpx
import pytest
from django.db import OperationalError, connection
from django.http import HttpResponse
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lobbies.fastlane import lane
from lobbies.fastlane.lane import _serve_together
from lobbies.models import Lobby, Message
from pocolobby.asgi import application
from tests.fast_lane import agent_post

pytestmark = pytest.mark.django_db(transaction=True)


def _savepoints(captured: CaptureQueriesContext) -> int:
    return sum(q["sql"].startswith("SAVEPOINT") for q in captured.captured_queries)


def _client(host: str = "127.0.0.1") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url=f"http://{host}"
    )


@pytest.mark.asyncio
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


@pytest.mark.asyncio
async def test_a_foreign_host_is_refused_as_json(lead):
    async with _client("evil.example") as client:
        response = await client.get("/v1/agents", headers={"Authorization": f"Bearer {lead.token}"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"


@pytest.mark.asyncio
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
@pytest.mark.asyncio
async def test_an_oversized_body_is_413_whoever_would_answer_the_route(lead, path):
    async with _client() as client:
        response = await client.post(
            path, headers={"Authorization": f"Bearer {lead.token}"}, content=b"x" * 300_000
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="group commit is the embedded store's")
def test_requests_that_queue_together_share_one_commit_and_a_refusal_stays_its_own(
    lead, backend, commits
):
    answers = _serve_together(
        [
            agent_post(lead.token, {"to": "backend", "content": "one", "client_request_id": "g1"}),
            agent_post(lead.token, {"to": "nobody", "content": "lost", "client_request_id": "g2"}),
            agent_post(lead.token, {"to": "backend", "content": "two", "client_request_id": "g3"}),
        ]
    )
    assert len(commits) == 1
    statuses = [a.status_code for a in answers if isinstance(a, HttpResponse)]
    assert statuses == [200, 404, 200]
    assert json.loads(answers[0].content)["status"] == "stored"  # type: ignore[union-attr]
    stored = Message.objects.filter(sender=lead.agent).order_by("sequence")
    assert [m.content for m in stored] == ["one", "two"]


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="group commit is the embedded store's")
def test_when_the_shared_commit_fails_every_request_is_told_nothing_was_kept(
    lead, backend, monkeypatch
):
    def failing() -> None:
        raise OperationalError("disk I/O error")

    connection.ensure_connection()
    monkeypatch.setattr(connection, "_commit", failing)
    answers = _serve_together(
        [
            agent_post(lead.token, {"to": "backend", "content": "one", "client_request_id": "f1"}),
            agent_post(lead.token, {"to": "backend", "content": "two", "client_request_id": "f2"}),
        ]
    )
    monkeypatch.undo()
    for answer in answers:
        assert isinstance(answer, HttpResponse) and answer.status_code == 503
        assert json.loads(answer.content)["error"]["code"] == "store_unavailable"
    assert not Message.objects.filter(sender=lead.agent).exists()


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="group commit is the embedded store's")
def test_a_retry_in_a_shared_commit_gets_the_original_and_the_others_are_stored(
    lead, backend, commits
):
    """The retry's send fails in its atomic block: the optimistic commit is abandoned, and
    served again the retry rolls back to its request's savepoint and reads the original."""
    first = {"to": "backend", "content": "one", "client_request_id": "k1"}
    stored = _serve_together([agent_post(lead.token, first)])[0]
    answers = _serve_together(
        [
            agent_post(lead.token, {"to": "backend", "content": "two", "client_request_id": "k2"}),
            agent_post(lead.token, first),
            agent_post(
                lead.token, {"to": "backend", "content": "three", "client_request_id": "k3"}
            ),
        ]
    )
    assert len(commits) == 2
    bodies = [json.loads(a.content) for a in answers if isinstance(a, HttpResponse)]
    assert [b["status"] for b in bodies] == ["stored", "stored", "stored"]
    original = json.loads(stored.content)  # type: ignore[union-attr]
    assert bodies[1]["message_id"] == original["message_id"]
    contents = Message.objects.filter(sender=lead.agent).order_by("sequence")
    assert [m.content for m in contents] == ["one", "two", "three"]


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="group commit is the embedded store's")
def test_a_shared_commit_of_sends_opens_no_savepoint(lead, backend, commits):
    with CaptureQueriesContext(connection) as captured:
        answers = _serve_together(
            [
                agent_post(
                    lead.token, {"to": "backend", "content": f"m{n}", "client_request_id": f"o{n}"}
                )
                for n in range(4)
            ]
        )
    assert [a.status_code for a in answers if isinstance(a, HttpResponse)] == [200] * 4
    assert _savepoints(captured) == 0 and len(commits) == 1
    assert Message.objects.filter(sender=lead.agent).count() == 4


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="group commit is the embedded store's")
@pytest.mark.parametrize("failure", ["answers 500", "raises"])
def test_a_request_that_fails_after_writing_loses_its_writes_and_the_others_keep_theirs(
    lead, backend, commits, monkeypatch, failure
):
    serve = lane._serve_api

    def failing_after_a_write(request):
        if request.path != "/v1/broken":
            return serve(request)
        Lobby.objects.create(name="half-done", created_at=timezone.now())
        if failure == "raises":
            raise RuntimeError("the view failed after writing")
        return HttpResponse(status=500)

    monkeypatch.setattr(lane, "_serve_api", failing_after_a_write)
    answers = _serve_together(
        [
            agent_post(lead.token, {"to": "backend", "content": "one", "client_request_id": "b1"}),
            agent_post(lead.token, {}, path="/v1/broken"),
            agent_post(lead.token, {"to": "backend", "content": "two", "client_request_id": "b2"}),
        ]
    )
    assert isinstance(answers[0], HttpResponse) and answers[0].status_code == 200
    if failure == "raises":
        assert isinstance(answers[1], RuntimeError)
    else:
        assert isinstance(answers[1], HttpResponse) and answers[1].status_code == 500
    assert isinstance(answers[2], HttpResponse) and answers[2].status_code == 200
    assert len(commits) == 1  # the abandoned optimistic one rolled back, never committed
    assert not Lobby.objects.filter(name="half-done").exists()
    stored = Message.objects.filter(sender=lead.agent).order_by("sequence")
    assert [m.content for m in stored] == ["one", "two"]
    # Sequences run on from the abandoned attempt's: it was rolled back too.
    assert [m.sequence for m in stored] == [stored[0].sequence, stored[0].sequence + 1]


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="group commit is the embedded store's")
@pytest.mark.asyncio
@pytest.mark.parametrize("shared", [True, False])
async def test_shared_commit_can_be_switched_off(lead, backend, monkeypatch, shared):
    """POCOLOBBY_SHARED_COMMIT=0 (benchmarks/shared_commit.py): each /v1 write commits alone."""
    batched: list[object] = []
    requests = lane.REQUESTS

    async def recorded(request):
        batched.append(request)
        return await requests(request)

    monkeypatch.setattr(lane, "SHARED_COMMIT", shared)
    monkeypatch.setattr(lane, "REQUESTS", recorded)
    async with _client() as client:
        response = await client.post(
            "/v1/messages",
            headers={"Authorization": f"Bearer {lead.token}"},
            json={"to": "backend", "content": "hi", "client_request_id": "r1"},
        )
    assert response.status_code == 200 and response.json()["status"] == "stored"
    assert len(batched) == (1 if shared else 0)
