"""History search through the search index: any case of all of Unicode, substrings, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import time_machine
from django.db import connection

from lobbies import selectors
from lobbies.actions.retention import sweep

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _found(client, query: str) -> list[str]:
    page = client.ok("get_messages", view="history", query=query)
    return [m["content"] for m in page["messages"]]


def _indexed(query: str) -> int:
    """Entries the search index itself holds for `query` (SQLite's FTS5 table, or the GIN
    index's expression on PostgreSQL)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT count(*) FROM lobbies_message_search WHERE lobbies_message_search MATCH %s",
                [f'"{query}"'],
            )
        else:
            cursor.execute(
                "SELECT count(*) FROM lobbies_message WHERE UPPER(content) LIKE UPPER(%s)",
                [f"%{query}%"],
            )
        return int(cursor.fetchone()[0])


def test_search_ignores_case_beyond_ascii(lead, backend):
    lead.send("backend", "Demain à l'école, puis Straße", "r-1")
    lead.send("backend", "nothing here", "r-2")
    assert _found(backend, "ÉCOLE") == ["Demain à l'école, puis Straße"]
    assert _found(backend, "À L'ÉC") == ["Demain à l'école, puis Straße"]
    assert _found(backend, "ÉCOLES") == []


def test_search_matches_inside_words(lead, backend):
    lead.send("backend", "Review the AUTHORIZATION change", "r-1")
    lead.send("backend", "lunch?", "r-2")
    assert _found(backend, "thoriz") == ["Review the AUTHORIZATION change"]
    assert _found(backend, 'say "hi"') == []  # quotes are text, not query syntax
    assert _found(backend, "ch") == ["lunch?", "Review the AUTHORIZATION change"]


def test_search_only_reaches_the_readers_own_history(lead, backend, make_agent):
    make_agent("frontend")
    lead.send("frontend", "école for frontend", "r-1")
    lead.send("backend", "école for backend", "r-2")
    assert _found(backend, "ÉCOLE") == ["école for backend"]


def test_retention_removes_a_message_from_search(lead, backend):
    with time_machine.travel(T0, tick=False):
        sent = lead.send("backend", "l'école est finie", "r-1")
        backend.ok("acknowledge_messages", message_ids=[sent["message_id"]])
    assert _found(backend, "ÉCOLE") == ["l'école est finie"] and _indexed("école") == 1
    sweep(T0 + timedelta(days=1))
    assert _found(backend, "ÉCOLE") == [] and _indexed("école") == 0


def test_search_pages_through_many_index_windows(lead, backend, make_agent, monkeypatch):
    """Matches are read from the index newest first a window at a time: pages stay newest
    first, complete and without repeats across windows, cursors and other agents' traffic."""
    monkeypatch.setattr(selectors, "SEARCH_WINDOW", 3)
    make_agent("frontend")
    expected = []
    for n in range(40):
        if n % 3 == 0:
            lead.send("frontend", f"build report {n} for frontend", f"f-{n}")  # not backend's
        elif n % 5 == 0:
            lead.send("backend", f"lunch at {n}?", f"l-{n}")  # no match
        else:
            lead.send("backend", f"BUILD report {n}", f"b-{n}")
            expected.append(f"BUILD report {n}")
    expected.reverse()
    found, cursor = [], None
    while True:
        args = {"view": "history", "query": "build rep", "limit": 4}
        page = backend.ok("get_messages", **args, **({"cursor": cursor} if cursor else {}))
        found += [m["content"] for m in page["messages"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == expected
