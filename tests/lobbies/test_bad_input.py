"""Junk thrown at send_message: always a 4xx JSON error naming the problem, nothing stored."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobbies.api.schemas import SendMessage
from lobbies.models import Delivery, Message

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "to",
        "content",
        "client_request_id",
        "kind",
        "priority",
        "reply_to",
        "correlation_id",
        "fields",
        "reply_expected",
        "from",
        "sender",
        "deliver_at",
        "",
    ]
)
argument_objects = st.dictionaries(field_names | st.text(max_size=8), json_values, max_size=7)
# Near misses: a valid request with one field replaced by junk.
VALID = {"to": "backend", "content": "hello", "client_request_id": "r-1"}
near_misses = st.builds(lambda key, value: {**VALID, key: value}, field_names, json_values).filter(
    lambda args: args != VALID
)
raw_bodies = st.binary(max_size=200) | st.text(max_size=200).map(str.encode)
bodies = (
    raw_bodies
    | argument_objects.map(lambda a: json.dumps(a).encode())
    | near_misses.map(lambda a: json.dumps(a).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
)


def _post(token: str, body: bytes) -> Any:
    return Client().post(
        "/v1/tools/send_message",
        data=body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies)
def test_junk_gets_a_clear_4xx_and_stores_nothing(lead, backend, body):
    before = (Message.objects.count(), Delivery.objects.count())
    response = _post(lead.token, body)
    if response.status_code == 200:
        # Junk that happens to be a valid send: it must really be one.
        payload = json.loads(body)
        assert set(payload) <= set(SendMessage.model_fields)
        assert response.json()["status"] == "stored"
        return
    assert 400 <= response.status_code < 500, (response.status_code, response.content)
    error = response.json()["error"]
    assert error["code"] and error["message"]
    assert (Message.objects.count(), Delivery.objects.count()) == before


def test_each_kind_of_bad_input_is_named(lead, backend):
    cases = {
        b"{not json": "not valid JSON",
        b"[1, 2]": "JSON object",
        json.dumps({**VALID, "to": 5}).encode(): "to:",
        json.dumps({"content": "x", "client_request_id": "r"}).encode(): "missing argument 'to'",
        json.dumps({**VALID, "colour": "red"}).encode(): "unknown argument 'colour'",
        json.dumps({**VALID, "content": "bad\u0000byte"}).encode(): "NUL",
        b'{"to": "backend", "content": "\\ud800", "client_request_id": "r"}': "content:",
        json.dumps({**VALID, "priority": "urgent"}).encode(): "priority",
        json.dumps({**VALID, "reply_to": True}).encode(): "reply_to",
        json.dumps({**VALID, "to": "ghost"}).encode(): "no agent 'ghost'",
    }
    for body, expected in cases.items():
        response = _post(lead.token, body)
        assert 400 <= response.status_code < 500, body
        assert expected in response.json()["error"]["message"], (body, response.json())
    assert Message.objects.count() == 0


def test_an_oversized_body_is_413(lead, backend):
    response = _post(lead.token, json.dumps({**VALID, "content": "x" * 300_000}).encode())
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert Message.objects.count() == 0


def test_a_body_nesting_too_deeply_is_refused_naming_what_nests(lead, backend):
    """An argument deeper than 64 levels is named; a body past 512 is refused unparsed (a
    2 KB body nested 1,024 deep, which the standard parser cannot read)."""

    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth

    cases = {
        json.dumps(VALID)[:-1] + f', "fields": {nested(65)}}}': (
            "argument 'fields' nests JSON deeper than 64 levels"
        ),
        json.dumps(VALID)[:-1] + f', "fields": {nested(500)}}}': "argument 'fields'",
        nested(1024): "the body nests JSON deeper than 512 levels (an argument may nest 64)",
        '{"fields": ' + nested(100_000) + "}": "the body nests JSON deeper than 512 levels",
    }
    for body, expected in cases.items():
        response = _post(lead.token, body.encode())
        assert response.status_code == 400, (body[:40], response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid_json" and expected in error["message"], error
    assert Message.objects.count() == 0
