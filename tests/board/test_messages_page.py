"""The messages page: the last day's traffic newest first, each recipient's delivery state,
filters and pages; contents for owners and viewers, and for the public only when the owner
turns that on."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from board import history
from board.history import PAGE_SIZE
from board.models import BoardConfig, Visibility
from lobbies.actions import operator
from lobbies.models import AuditEvent, Message
from tests.board.dashboard_helpers import LOCAL_HOST, operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db


def _ids(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-message="(\d+)"', html)]


def _page(client: Client, query: str = "", path: str = "/my-team/messages") -> str:
    response = client.get(f"{path}{'?' + query if query else ''}")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def test_the_days_traffic_reads_newest_first_with_each_recipients_state(
    lobby, lead: AgentClient, backend: AgentClient, make_agent
):
    make_agent("designer")
    first = lead.send("backend", "<b>bold</b> plan", "r-1", kind="request")["message_id"]
    second = lead.send("designer", "later", "r-2", priority="important")["message_id"]
    backend.ok("acknowledge_messages", message_ids=[first])
    operator.disable_agent("my-team", "designer")
    old = lead.send("backend", "yesterday's news", "r-3")["message_id"]
    Message.objects.filter(pk=old).update(created_at=timezone.now() - timedelta(hours=25))
    html = _page(operator_client())
    assert _ids(html) == [second, first]  # the 25-hour-old one is out of the window
    assert "&lt;b&gt;bold&lt;/b&gt; plan" in html and "<b>bold</b>" not in html
    seen = re.search(rf'data-message="{first}".*?</li>\s*</ul>', html, re.S).group(0)
    assert (
        'data-recipient="backend"' in seen and '<span class="chip seen">acknowledged</span>' in seen
    )
    assert "<time" in seen.split('data-recipient="backend"')[1]
    held = re.search(rf'data-message="{second}".*?</li>\s*</ul>', html, re.S).group(0)
    assert "held: recipient disabled" in held and "chip important" in held


def test_long_contents_are_folded(lobby, lead, backend):
    lead.send("backend", "start " + "word " * 200, "r-1")
    html = _page(operator_client())
    assert '<details class="content">' in html and "show all" in html


def test_filters_by_agent_room_kind_priority_and_text(lobby, lead, backend, make_agent):
    make_agent("designer")
    lead.ok("create_room", room_id="design", members=["lead", "designer"])
    ids = {
        "to-backend": lead.send("backend", "alpha", "r-1", kind="question")["message_id"],
        "important": lead.send("designer", "beta", "r-2", priority="important")["message_id"],
        "room": lead.ok(
            "send_room_message", room_id="design", content="gamma", client_request_id="r-3"
        )["message_id"],
        "from-backend": backend.send("lead", "Alpha again", "r-4")["message_id"],
    }
    client = operator_client()
    assert _ids(_page(client, "agent=backend")) == [ids["from-backend"], ids["to-backend"]]
    assert _ids(_page(client, "room=design")) == [ids["room"]]
    assert _ids(_page(client, "kind=question")) == [ids["to-backend"]]
    assert _ids(_page(client, "priority=important")) == [ids["important"]]
    assert _ids(_page(client, "q=alpha")) == [ids["from-backend"], ids["to-backend"]]
    assert _ids(_page(client, "agent=designer&q=beta")) == [ids["important"]]
    empty = _page(client, "agent=nobody")
    assert _ids(empty) == [] and "No message in the last 24 hours matches" in empty


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("kind=gossip", "kind is one of"),
        ("priority=urgent", "priority is info or important"),
        ("agent=Not%20A%20Name", "is not a name"),
        ("before=abc", "before is a message sequence"),
        ("q=" + "x" * 201, "at most 200"),
    ],
)
def test_a_bad_filter_is_refused_by_name(lobby, query, words):
    response = operator_client().get(f"/my-team/messages?{query}")
    assert response.status_code == 400 and words in response.content.decode()


def test_pages_reach_every_message_once(lobby, lead, backend):
    sent = [lead.send("backend", f"m{n}", f"r-{n}")["message_id"] for n in range(PAGE_SIZE + 5)]
    client = operator_client()
    first = _page(client)
    assert _ids(first) == sent[::-1][:PAGE_SIZE]
    older = re.search(r'href="/my-team/messages\?([^"]+)" data-older', first).group(1)
    second = _page(client, older.replace("&amp;", "&"))
    assert _ids(second) == sent[::-1][PAGE_SIZE:] and "data-older" not in second
    assert "data-newest" in second
    assert "data-live" in first and "data-live" not in second  # only the newest page refreshes


def test_the_live_part_answers_with_the_same_filters(lobby, lead, backend):
    a = lead.send("backend", "one", "r-1")["message_id"]
    lead.send("lead", "note to self", "r-2")
    part = operator_client().get("/my-team/parts/messages?q=one", HTTP_HX_REQUEST="true")
    assert part.status_code == 200 and _ids(part.content.decode()) == [a]


def test_a_public_page_hides_contents_until_the_owner_shares_them(lobby, lead, backend, settings):
    lead.send("backend", "secret plan", "r-1")
    BoardConfig.objects.create(lobby=lobby, visibility=Visibility.PUBLIC, updated_at=timezone.now())
    public = Client(HTTP_HOST=LOCAL_HOST)
    html = _page(public)
    assert "secret plan" not in html and "not shown publicly" in html
    assert 'name="q"' not in html  # no searching words it cannot see
    operator = operator_client()
    answer = operator.post(
        "/my-team/settings/public-contents",
        data=json.dumps({"public_message_contents": True}),
        content_type="application/json",
        HTTP_ORIGIN=f"http://{LOCAL_HOST}",
    )
    assert answer.status_code == 200, answer.content
    assert AuditEvent.objects.filter(target="message contents public").exists()
    assert "secret plan" in _page(public)
    refused = public.post(
        "/my-team/settings/public-contents",
        data=json.dumps({"public_message_contents": False}),
        content_type="application/json",
        HTTP_ORIGIN=f"http://{LOCAL_HOST}",
    )
    assert refused.status_code == 403
    assert BoardConfig.objects.get(lobby=lobby).public_message_contents is True


def test_a_private_lobbys_messages_are_not_for_strangers(lobby, lead, backend):
    lead.send("backend", "secret plan", "r-1")
    response = Client(HTTP_HOST=LOCAL_HOST).get("/my-team/messages")
    assert response.status_code == 403 and "secret plan" not in response.content.decode()


def test_a_text_search_reads_a_bounded_span_and_older_searches_on(
    lobby, lead, backend, monkeypatch
):
    monkeypatch.setattr(history, "SEARCH_SPAN", 5)
    needle = lead.send("backend", "the needle", "r-0")["message_id"]
    for n in range(1, 12):
        lead.send("backend", f"hay {n}", f"r-{n}")
    client = operator_client()
    first = _page(client, "q=needle")
    assert _ids(first) == [] and "This search read the messages back to number" in first
    cursor = re.search(r'href="/my-team/messages\?([^"]+)" data-older', first).group(1)
    second = _page(client, cursor.replace("&amp;", "&"))
    cursor = re.search(r'href="/my-team/messages\?([^"]+)" data-older', second).group(1)
    third = _page(client, cursor.replace("&amp;", "&"))
    assert _ids(third) == [needle] and "data-older" not in third


def _older(html: str) -> str:
    return (
        re.search(r'href="/my-team/messages\?([^"]+)" data-older', html)
        .group(1)
        .replace("&amp;", "&")
    )


def test_an_agents_pages_merge_what_it_sent_and_received_with_a_second_filter(lobby, lead, backend):
    """Sends and copies interleaved across two pages, with a kind filter that keeps a third
    of them: every match once, newest first, from the two index reads merged."""
    matching = []
    for n in range(3 * PAGE_SIZE + 6):
        sender, to = (lead, "backend") if n % 2 else (backend, "lead")
        kind = {"kind": "request"} if n % 3 == 0 else {}
        sent = sender.send(to, f"m{n}", f"a-{n}", **kind)["message_id"]
        if kind:
            matching.append(sent)
    client = operator_client()
    first = _page(client, "agent=backend&kind=request")
    assert _ids(first) == matching[::-1][:PAGE_SIZE]
    second = _page(client, _older(first))
    assert _ids(second) == matching[::-1][PAGE_SIZE:] and "data-older" not in second
    assert _ids(_page(client, "agent=lead&kind=request")) == matching[::-1][:PAGE_SIZE]


def test_a_bidi_override_in_a_message_is_isolated_to_that_message(lobby, lead, backend):
    """An unterminated U+202E in one message must not reverse the page after it (issue 28):
    what an agent wrote is shown in its own <bdi>, so its overrides end with it."""
    lead.send("backend", "invoice \u202egpj.exe", "r-1")
    lead.send("backend", "start \u202e" + "word " * 200, "r-2")  # folded: opening and whole
    html = _page(operator_client())
    assert '<p class="content"><bdi>invoice \u202egpj.exe</bdi></p>' in html
    assert re.search('<bdi class="opening">start \u202e', html)
    assert re.search('<p class="whole"><bdi>start \u202e', html)


def test_each_copy_says_how_far_it_got(lobby, lead: AgentClient, backend: AgentClient, make_agent):
    """Stored, sent to the bridge, at the bridge, pushed into the session or typed into the
    pane: from the delivery's own transport facts, instead of "pending" for all."""
    from lobbies.models import Agent, Connection, Delivery
    from lobbies.push import presence

    make_agent("designer")
    make_agent("tester")
    make_agent("paned")
    ids = {
        name: lead.send(name, f"to {name}", f"r-{name}")["message_id"]
        for name in ("backend", "designer", "tester", "paned")
    }
    now = timezone.now()
    Delivery.objects.filter(message_id=ids["designer"]).update(pushed_at=now, pushed_generation=1)
    Delivery.objects.filter(message_id=ids["tester"]).update(pushed_at=now, adapter_received_at=now)
    Delivery.objects.filter(message_id=ids["paned"]).update(
        pushed_at=now, adapter_received_at=now, notified_generation=1
    )
    paned = Agent.objects.get(agent_id="paned")
    presence.open_connection(paned.pk, paned.runtime_generation)
    Connection.objects.filter(agent=paned).update(transport="tmux")
    html = _page(operator_client())
    chips = dict(
        re.findall(
            r'data-recipient="([\w-]+)"><span class="who">[^<]*</span>\s*'
            r'<span class="chip \w+">([^<]*)</span>',
            html,
        )
    )
    assert chips == {
        "backend": "stored",
        "designer": "sent to the bridge",
        "tester": "at the bridge",
        "paned": "typed into the pane",
    }
    Connection.objects.filter(agent=paned).update(transport="channel")
    html = _page(operator_client())
    assert "pushed into the session" in html and 'chip pending">pending<' not in html
