"""Line arguments refuse what could break or reorder a line the owner reads."""

from __future__ import annotations

import pytest

from lobbies.models import Agent

REFUSED = ["\x85", "\x9b", "\u2028", "\u2029", "\u202a", "\u202e", "\u2066", "\u2069"]


@pytest.mark.parametrize("ch", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_status_and_owner_requests_refuse_c1_separators_and_bidi_controls(backend, ch):
    status, body = backend.call("set_status", status=f"done{ch}evil")
    assert status == 400 and body["error"]["message"].startswith("status:")
    assert f"U+{ord(ch):04X}" in body["error"]["message"]
    status, body = backend.call("set_owner_requests", count=1, line=f"approve{ch}x")
    assert status == 400 and body["error"]["message"].startswith("line:")
    agent = Agent.objects.get(agent_id="backend")
    assert (agent.status_line, agent.owner_request_line) == ("", "")


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get_messages", {"view": "history", "query": "a\u202eb"}),
        ("ready", {"nonce": "a\u2066b"}),
        (
            "send_message",
            {
                "to": "lead",
                "content": "x",
                "client_request_id": "l-1",
                "correlation_id": "c\u2028d",
            },
        ),
        (
            "send_message",
            {
                "to": "lead",
                "content": "x",
                "client_request_id": "l-2",
                "fields": {"evidence": "e\x85f"},
            },
        ),
    ],
)
def test_query_nonce_correlation_ids_and_fields_refuse_them_too(lead, backend, tool, arguments):
    status, _ = backend.call(tool, **arguments)
    assert status == 400


def test_ordinary_text_in_other_scripts_is_a_line(backend):
    assert backend.ok("set_status", status="review: 日本語 עברית ✓")["status"]
