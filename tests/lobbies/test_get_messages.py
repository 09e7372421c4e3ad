from __future__ import annotations

from lobbies.actions import operator
from tests.conftest import AgentClient


def _contents(page: dict) -> list[str]:
    return [m["content"] for m in page["messages"]]


def test_inbox_lists_pending_messages_oldest_first_in_pages(lead: AgentClient, backend):
    for n in range(5):
        lead.send("backend", f"m{n}", f"r-{n}")
    first = backend.ok("get_messages", limit=2)
    assert _contents(first) == ["m0", "m1"] and first["next_cursor"]
    second = backend.ok("get_messages", limit=2, cursor=first["next_cursor"])
    third = backend.ok("get_messages", limit=2, cursor=second["next_cursor"])
    assert _contents(second) == ["m2", "m3"]
    assert _contents(third) == ["m4"] and third["next_cursor"] is None


def test_inbox_drops_acknowledged_messages(lead, backend):
    ids = [lead.send("backend", f"m{n}", f"r-{n}")["message_id"] for n in range(3)]
    backend.ok("acknowledge_messages", message_ids=[ids[1]])
    assert _contents(backend.ok("get_messages")) == ["m0", "m2"]


def test_history_is_newest_first_with_both_directions(lead, backend):
    lead.send("backend", "question", "r-1", kind="question")
    backend.send("lead", "answer", "r-2", kind="report")
    history = backend.ok("get_messages", view="history")
    assert _contents(history) == ["answer", "question"]
    assert [m["from"] for m in history["messages"]] == ["backend", "lead"]


def test_history_pages_reach_everything_once(lead, backend):
    for n in range(7):
        lead.send("backend", f"m{n}", f"r-{n}")
    seen, cursor = [], None
    while True:
        args = {"view": "history", "limit": 3} | ({"cursor": cursor} if cursor else {})
        page = backend.ok("get_messages", **args)
        seen += _contents(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"m{n}" for n in reversed(range(7))]


def test_history_search_is_case_insensitive(lead, backend):
    lead.send("backend", "Review the AUTH change", "r-1")
    lead.send("backend", "lunch?", "r-2")
    found = backend.ok("get_messages", view="history", query="auth")
    assert _contents(found) == ["Review the AUTH change"]


def test_query_needs_history_view(backend):
    status, body = backend.call("get_messages", query="x")
    assert status == 400 and "view 'history'" in body["error"]["message"]


def test_sender_sees_recipient_facts_for_its_own_sends_only(make_agent, lead, backend):
    ops = make_agent("ops")
    sent = lead.send("backend", "deploy", "r-1", kind="assignment")
    backend.ok("acknowledge_messages", message_ids=[sent["message_id"]])
    ops.send("backend", "unrelated", "o-1")

    mine = lead.ok("get_messages", view="history")["messages"][0]
    assert mine["recipients"][0]["agent_id"] == "backend"
    assert mine["recipients"][0]["delivery_state"] == "seen"
    assert mine["recipients"][0]["agent_seen_at"] is not None
    assert "notification_attempted_at" in mine["recipients"][0]

    received = backend.ok("get_messages", view="history")["messages"]
    assert all("recipients" not in m for m in received)
    assert {m["delivery"]["delivery_state"] for m in received} == {"seen", "pending"}
    # A third agent sees neither the message nor anyone's facts.
    assert lead.ok("get_messages", view="history")["messages"][0]["content"] == "deploy"
    assert _contents(ops.ok("get_messages", view="history")) == ["unrelated"]


def test_other_lobbies_are_invisible(make_agent, lead, backend):
    operator.create_lobby("other-team")
    stranger = make_agent("backend", lobby_name="other-team")
    lead.send("backend", "ours", "r-1")
    assert stranger.ok("get_messages")["messages"] == []
    assert stranger.ok("get_messages", view="history")["messages"] == []


def test_a_cursor_of_another_view_or_forged_is_refused(lead, backend):
    for n in range(3):
        lead.send("backend", f"m{n}", f"r-{n}")
    cursor = backend.ok("get_messages", limit=1)["next_cursor"]
    status, body = backend.call("get_messages", view="history", cursor=cursor)
    assert (status, body["error"]["code"]) == (400, "invalid_cursor")
    status, body = backend.call("get_messages", cursor="bm90LWEtY3Vyc29y")
    assert (status, body["error"]["code"]) == (400, "invalid_cursor")


def test_get_route_takes_query_parameters(lead, backend):
    for n in range(3):
        lead.send("backend", f"m{n}", f"r-{n}")
    response = backend.client.get(
        "/v1/messages", {"limit": "2"}, HTTP_AUTHORIZATION=f"Bearer {backend.token}"
    )
    assert response.status_code == 200 and len(response.json()["messages"]) == 2
    response = backend.client.get(
        "/v1/messages", {"limit": "many"}, HTTP_AUTHORIZATION=f"Bearer {backend.token}"
    )
    assert response.status_code == 400 and "limit" in response.json()["error"]["message"]
