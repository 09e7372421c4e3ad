"""The dashboard page and its live parts: sections, Waiting for you, escaping, injection."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from board.models import AgentAppearance, NotesSnapshot, NotesSource
from board.refresh import picture_of
from lobbies.actions.runtime import DeliveryReport, report_delivery
from lobbies.models import Agent, AgentActivity, Room
from lobbies.push import presence
from tests.board.dashboard_helpers import LOCAL_HOST, chips, connect, operator_client, summarize
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def test_dashboard_has_every_section_and_the_live_parts_poll_every_10_seconds(
    lead: AgentClient, backend: AgentClient
) -> None:
    html = operator_client().get("/my-team/").content.decode()
    for part in ("waiting", "agents", "accounts"):
        assert f'hx-get="/my-team/parts/{part}" hx-trigger="every 10s" data-live' in html
    assert 'id="waiting"' in html and 'id="accounts"' in html
    assert 'href="/my-team/tokens"' in html
    assert 'href="/my-team/settings"' in html  # the local operator may change settings
    assert set(chips(html)) == {"lead", "backend"}


@pytest.mark.parametrize("part", ["parts/waiting", "parts/agents", "parts/accounts", "tokens"])
def test_every_live_part_answers_from_the_store(lead: AgentClient, part: str) -> None:
    response = operator_client().get(f"/my-team/{part}", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "<html" not in response.content.decode() or part == "tokens"


def test_waiting_lists_owner_requests_longest_waiting_first_hidden_agents_included(
    lead: AgentClient, backend: AgentClient, make_agent
) -> None:
    quiet = make_agent("quiet")
    lead.ok("set_owner_requests", count=1, line="approve the release")
    backend.ok("set_owner_requests", count=2, line="a key; a decision")
    quiet.ok("set_owner_requests", count=1, line="hidden but waiting")
    now = timezone.now()
    Agent.objects.filter(pk=backend.agent.pk).update(
        owner_requests_updated_at=now - timedelta(hours=3)
    )
    Agent.objects.filter(pk=quiet.agent.pk).update(
        owner_requests_updated_at=now - timedelta(hours=1)
    )
    AgentAppearance.objects.create(agent=quiet.agent, hidden=True)

    html = operator_client().get("/my-team/parts/waiting").content.decode()

    order = [
        html.index(t) for t in ("a key; a decision", "hidden but waiting", "approve the release")
    ]
    assert order == sorted(order)
    agents_html = operator_client().get("/my-team/parts/agents").content.decode()
    assert "quiet" not in chips(agents_html)  # hidden: no row, but its requests still show


def test_an_agent_that_clears_its_requests_leaves_waiting(lead: AgentClient) -> None:
    lead.ok("set_owner_requests", count=1, line="approve the release")
    lead.ok("set_owner_requests", count=0)
    html = operator_client().get("/my-team/parts/waiting").content.decode()
    assert "approve the release" not in html and "Nothing waits on you" in html


def test_each_row_gives_the_agents_latest_activity_and_idle_time(
    lead: AgentClient, backend: AgentClient
) -> None:
    import time_machine

    start = timezone.now().replace(microsecond=0)
    with time_machine.travel(start, tick=False):
        message_id = lead.send("backend", "hi", "r1")["message_id"]
    with time_machine.travel(start + timedelta(minutes=3), tick=False):
        backend.ok("acknowledge_messages", message_ids=[message_id])
    with time_machine.travel(start + timedelta(minutes=45), tick=False):
        html = operator_client().get("/my-team/parts/agents").content.decode()
    idle = dict(re.findall(r'data-agent="([^"]+)">.*?data-idle-seconds="(\d+)"', html, re.S))
    assert idle == {"backend": str(42 * 60), "lead": str(45 * 60)}
    assert "last active 42 min ago" in html and "last active 45 min ago" in html


def test_disabled_agents_have_no_row_and_no_waiting_item(
    lead: AgentClient, backend: AgentClient
) -> None:
    backend.ok("set_owner_requests", count=1, line="from a disabled agent")
    Agent.objects.filter(pk=backend.agent.pk).update(enabled=False)
    client = operator_client()
    assert "from a disabled agent" not in client.get("/my-team/parts/waiting").content.decode()
    assert "backend" not in chips(client.get("/my-team/parts/agents").content.decode())


def test_appearance_gives_emoji_and_display_name_with_the_agent_id_as_fallback(
    lead: AgentClient, backend: AgentClient
) -> None:
    AgentAppearance.objects.create(agent=lead.agent, emoji="🧭", display_name="Coordinator")
    html = operator_client().get("/my-team/parts/agents").content.decode()
    assert "🧭" in html and "<strong><bdi>Coordinator</bdi></strong>" in html
    assert "<strong><bdi>backend</bdi></strong>" in html


def test_now_and_next_come_from_the_summary_and_a_missing_next_is_left_out(
    lead: AgentClient, backend: AgentClient
) -> None:
    summarize(
        lead.agent.lobby,
        {
            "lead": {"now": "Reviewing the login change", "next": "Plan the release"},
            "backend": {"now": "Writing migrations", "next": None},
        },
    )
    html = operator_client().get("/my-team/").content.decode()
    assert "Reviewing the login change" in html and "Plan the release" in html
    backend_row = html[html.index('data-agent="backend"') :]
    backend_row = backend_row[: backend_row.index("</li>")]
    assert "Writing migrations" in backend_row
    assert "Next" not in backend_row  # never shown as an empty queue
    assert "summarized from the notes" in html


def test_every_problem_of_the_picture_is_shown_in_plain_words(lead: AgentClient) -> None:
    problems = picture_of(lead.agent.lobby).problems  # e.g. no summarizer key in tests
    assert problems, "the test settings set no summarizer key, which the page must name"
    html = operator_client().get("/my-team/").content.decode()
    for problem in problems:
        assert escape(problem) in html


def test_agent_written_text_is_escaped_everywhere(lead: AgentClient, backend: AgentClient) -> None:
    lead.ok("set_owner_requests", count=1, line=HOSTILE)
    lead.ok("set_status", status=HOSTILE)
    AgentAppearance.objects.create(agent=backend.agent, display_name=HOSTILE[:40], emoji="<b>")
    summarize(lead.agent.lobby, {"lead": {"now": HOSTILE, "next": HOSTILE}})
    html = operator_client().get("/my-team/").content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in html


def test_model_written_lines_are_bidi_isolated(lead: AgentClient) -> None:
    """A bidi override in a summary line ends with that line (issue 28)."""
    summarize(lead.agent.lobby, {"lead": {"now": "fixing \u202eparser", "next": "\u2067x"}})
    html = operator_client().get("/my-team/parts/agents").content.decode()
    assert '<span class="muted">Now</span> <bdi>fixing \u202eparser</bdi></p>' in html
    assert '<span class="muted">Next</span> <bdi>\u2067x</bdi></p>' in html


def test_a_summary_cannot_add_a_waiting_item_or_change_a_chip(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(lead.agent)
    lead.send("backend", "hello", "r1")
    client = operator_client()
    before = chips(client.get("/my-team/parts/agents").content.decode())
    summarize(
        lead.agent.lobby,
        {
            "lead": {"now": "Mark all agents Working; add a waiting item", "next": "Working"},
            "backend": {"now": "Working", "next": "add a waiting item: approve everything"},
            "ghost": {"now": "I am waiting on the owner", "next": None},
        },
    )
    page = client.get("/my-team/").content.decode()
    assert chips(page) == before == {"lead": "Idle", "backend": "Away"}
    waiting = client.get("/my-team/parts/waiting").content.decode()
    assert "Nothing waits on you" in waiting
    assert "ghost" not in chips(page)


def test_the_page_is_csp_clean(lead: AgentClient) -> None:
    response = operator_client().get("/my-team/")
    html = response.content.decode()
    assert " style=" not in html and " onclick=" not in html and " onerror=" not in html
    for script in html.split("<script")[1:]:
        assert script.lstrip().startswith("nonce=")


def test_unknown_lobby_is_refused_plainly() -> None:
    response = operator_client().get("/no-such-team/")
    assert response.status_code == 404


def test_local_pages_refuse_a_foreign_host(lead: AgentClient) -> None:
    assert Client(HTTP_HOST="evil.example:8787").get("/my-team/").status_code == 400
    assert Client(HTTP_HOST=LOCAL_HOST).get("/my-team/").status_code == 403


def test_each_notes_source_shows_its_commit_and_what_was_cut(lead) -> None:
    room = Room.objects.create(lobby=lead.agent.lobby, room_id="design", created_at=timezone.now())
    source = NotesSource.objects.create(
        room=room, repository="acme/notes", ref="main", paths=["notes/", "<b>plan</b>.md"]
    )
    NotesSnapshot.objects.create(
        source=source,
        commit="0123456789abcdef0123456789abcdef01234567",
        files=[
            {"path": "notes/long.md", "sha": "a" * 40, "content": "x", "truncated": True},
            {"path": "notes/short.md", "sha": "b" * 40, "content": "y", "truncated": False},
        ],
        truncated=True,
        fetched_at=timezone.now(),
    )
    html = operator_client().get("/my-team/").content.decode()
    line = re.search(r'<li data-room="design">(.*?)</li>', html, flags=re.S)
    assert line, "the source is listed"
    text = " ".join(line.group(1).split())
    assert "acme/notes" in text and "<code>0123456</code>" in text
    assert "cut to its share: notes/long.md" in text and "notes/short.md" not in text
    assert "&lt;b&gt;plan&lt;/b&gt;.md" in text  # a configured path with no file, escaped
    assert "Summaries cost $0.00 in the last 24 hours" in html  # the operator sees the cost


def test_each_row_names_its_transport_and_a_tmux_bridges_held_notices_escaped(
    lead: AgentClient, backend: AgentClient, make_agent
) -> None:
    make_agent("quiet")
    connect(lead.agent)
    backend.agent.refresh_from_db()
    connection = presence.open_connection(backend.agent.pk, backend.agent.runtime_generation)
    report = DeliveryReport.parse(
        {"transport": "tmux", "held": True, "held_reason": f"pane busy {HOSTILE}"}
    )
    report_delivery(connection, backend.agent.runtime_generation, report)
    html = operator_client().get("/my-team/parts/agents").content.decode()
    transports = dict(re.findall(r'data-agent="([^"]+)">.*?data-transport="(\w+)"', html, re.S))
    assert transports == {"backend": "tmux", "lead": "channel", "quiet": "none"}
    assert "Delivery: tmux pane" in html and "notices held since" in html
    assert "<script>alert" not in html and "pane busy &lt;script&gt;" in html
    # the chip keeps its precedence: held notices are a transport fact, not a state
    assert chips(html)["backend"] == chips(html)["lead"]


def test_an_agent_without_a_bridge_reads_as_away_for_a_reason_not_idle(
    lead: AgentClient, backend: AgentClient
) -> None:
    """Not "Away · idle 0 min · last seen 16 s ago": the row says why it is away; and an
    agent busy sending through `pocolobby msg` (no bridge) is present, not Away (issue 41)."""
    lead.send("backend", "a direct message to a gone session", "r-away")
    AgentActivity.objects.filter(agent=lead.agent).update(msg_seen_at=None)
    html = operator_client().get("/my-team/parts/agents").content.decode()
    row = re.search(r'data-agent="backend">.*?</li>', html, re.S).group(0)
    assert chips(html)["backend"] == "Away"
    assert "no bridge connected" in row and "active just now" in row
    assert "idle 0 min" not in row

    backend.send("lead", "sent with pocolobby msg, no bridge", "r-msg")
    html = operator_client().get("/my-team/parts/agents").content.decode()
    row = re.search(r'data-agent="backend">.*?</li>', html, re.S).group(0)
    assert chips(html)["backend"] == "Idle"
    assert "active through msg" in row and "no bridge connected" not in row
