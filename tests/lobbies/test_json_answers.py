"""/v1 answers are compact UTF-8 JSON (lobbies.http.JsonAnswer), whatever an agent stored."""

from __future__ import annotations

import json

from tests.conftest import AgentClient
from tests.lobbies.test_continuity import Session


def test_a_checkpoint_with_an_integer_past_64_bits_reads_back_exactly(backend: AgentClient):
    """orjson refuses such an integer; the answer falls back to the standard encoder."""
    huge = {"counter": 2**70, "negative": -(2**80), "text": "ok"}
    session = Session(backend)
    session.ok("save_checkpoint", expected_revision=0, checkpoint=huge, covers_receipts_through=0)
    status, body = session.call("read_checkpoint")
    assert status == 200
    assert body["checkpoint"]["checkpoint"] == huge


def test_answers_are_utf8_json_with_times_in_milliseconds(lead: AgentClient, backend: AgentClient):
    text = 'Übersicht: größe 🚀 "quoted" \\ back'
    sent = lead.call("send_message", to="backend", content=text, client_request_id="utf8")
    assert sent[0] == 200, sent
    response = backend.client.get("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {backend.token}")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert text.encode("utf-8")[:10] in response.content  # not \\u escapes
    message = json.loads(response.content)["messages"][0]
    assert message["content"] == text
    created = message["created_at"]
    assert created.endswith("Z") and len(created) == len("2026-12-02T04:47:02.844Z"), created
