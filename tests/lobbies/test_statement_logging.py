"""The send path's statements skip Django's cursor only while nobody is watching them."""

from __future__ import annotations

from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from tests.conftest import AgentClient


def test_a_captured_send_shows_each_of_its_statements(lead: AgentClient, backend: AgentClient):
    with CaptureQueriesContext(connection) as queries:
        lead.send("backend", "hello", "r-1")
    statements = [q["sql"] for q in queries.captured_queries]
    assert any(s.startswith("UPDATE lobbies_lobby SET message_sequence") for s in statements)
    assert any(s.startswith('INSERT INTO "lobbies_message"') for s in statements)
    assert any(s.startswith('INSERT INTO "lobbies_delivery"') for s in statements)


def test_queries_are_logged_while_a_test_turns_debug_on(db: None):
    assert connection.queries_logged is False  # read once: the backend remembers DEBUG
    with override_settings(DEBUG=True):
        assert connection.queries_logged is True
    assert connection.queries_logged is False
