"""/v1 answers are compact UTF-8 JSON (lobbies.api.http.JsonAnswer), whatever an agent stored."""

from __future__ import annotations

import json

import pytest

from lobbies.api.http import _parsed
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


EDGE_BODIES = [
    b'{"counter": 1180591620717411303424}',  # past 64 bits: orjson would make it a float
    b'{"counter": -18446744073709551617, "small": 9223372036854775807}',
    b'{"id": "r-1234567890", "n": 123456789012, "big": 36893488147419103232}',
    b'{"ids": [123456789, 123456789, 123456789], "when": "2026-12-02"}',  # many digits, no run
    b'{"ratio": 0.1, "tiny": 5e-324, "zero": -0.0}',
    b'{"big": 1e400}',  # the standard parser reads infinity
    b'{"nan": NaN, "inf": -Infinity}',
    b'{"lone": "\\ud800"}',
    b'{"a": 1, "a": 2}',
    '{"text": "Übersicht 🚀"}'.encode(),
    '{"utf16": true}'.encode("utf-16"),
    b"\xef\xbb\xbf{}",  # a byte-order mark, accepted by the standard parser
]


def test_request_bodies_parse_as_the_standard_parser_reads_them():
    """The fast parser (orjson) never changes what a body means: each value, and each
    refusal, is the standard library's."""
    for raw in EDGE_BODIES:
        assert repr(_parsed(raw)) == repr(json.loads(raw)), raw
    for bad in (b'{"a": }', b"[1, 2,]", b'{"a": "\x01"}'):
        with pytest.raises(ValueError) as ours:
            _parsed(bad)
        with pytest.raises(ValueError) as theirs:
            json.loads(bad)
        assert str(ours.value) == str(theirs.value), bad
