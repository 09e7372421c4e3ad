"""The 24-hour strip: messages sent and direct messages received per quarter hour, counted at
render time in one grouped query through the (lobby, created_at) index."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from board.models import WorkStretch
from board.strip import CELLS, message_counts, strip_window
from lobbies.models import Message
from tests.board.dashboard_helpers import operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db


def _counts(agent: AgentClient) -> list[int]:
    lobby = agent.agent.lobby
    return message_counts(lobby, [agent.agent.pk], timezone.now())[agent.agent.pk]


def test_sent_and_direct_received_count_but_broadcasts_and_rooms_received_do_not(
    make_agent,
) -> None:
    lead = make_agent("lead", manage_rooms=True, broadcast=True)
    backend = make_agent("backend")
    lead.send("backend", "direct", "r1")
    lead.ok("broadcast", content="everyone", client_request_id="r2")
    lead.ok("create_room", room_id="ops", members=["lead", "backend"])
    lead.ok("send_room_message", room_id="ops", content="room", client_request_id="r3")
    assert sum(_counts(lead)) == 3  # everything it sent
    assert sum(_counts(backend)) == 1  # only the direct message it received


def test_messages_land_in_their_quarter_hour_and_older_ones_drop_out(
    lead: AgentClient, backend: AgentClient
) -> None:
    for n in range(3):
        lead.send("backend", f"m{n}", f"r{n}")
    now = timezone.now()
    start, end = strip_window(now)
    assert end - start == timedelta(hours=24) and start <= now - timedelta(hours=23, minutes=45)
    _first, second, third = Message.objects.order_by("sequence")
    Message.objects.filter(pk=second.pk).update(created_at=now - timedelta(hours=2))
    Message.objects.filter(pk=third.pk).update(created_at=now - timedelta(hours=25))
    counts = _counts(lead)
    assert len(counts) == CELLS and sum(counts) == 2
    assert counts[CELLS - 1] == 1
    two_hours_ago = int((now - timedelta(hours=2) - start) / timedelta(minutes=15))
    assert counts[two_hours_ago] == 1


def test_one_grouped_query_whatever_the_number_of_agents(make_agent) -> None:
    agents = [make_agent(f"a{n}") for n in range(6)]
    for n, agent in enumerate(agents):
        agent.send("a0", "hi", f"r{n}")
    lobby = agents[0].agent.lobby
    with CaptureQueriesContext(connection) as queries:
        message_counts(lobby, [a.agent.pk for a in agents], timezone.now())
    assert len(queries) == 1
    sql = queries[0]["sql"]
    assert "GROUP BY" in sql.upper() and "UNION ALL" in sql.upper()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        else:  # a handful of rows: ask PostgreSQL which index it would use at scale
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}")
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "delivery_recipient_time" in plan and "Seq Scan" not in plan
    if connection.vendor == "sqlite":  # PostgreSQL may prefer the lobby key on a few rows
        assert "message_lobby_time" in plan


def test_settled_quarter_hours_are_read_once_and_open_ones_on_every_render(
    lead: AgentClient, backend: AgentClient
) -> None:
    lead.send("backend", "early", "r1")
    later = (timezone.now() + timedelta(hours=1)).replace(minute=7, second=0, microsecond=0)
    lobby, pks = lead.agent.lobby, [lead.agent.pk, backend.agent.pk]
    with time_machine.travel(later, tick=False):
        first = message_counts(lobby, pks, later)
        lead.send("backend", "in the open quarter hour", "r2")
        with CaptureQueriesContext(connection) as queries:
            second = message_counts(lobby, pks, later)
    start, end = strip_window(later)
    sql = queries[0]["sql"]
    assert (end - timedelta(minutes=15)).strftime("%Y-%m-%d %H:%M:%S") in sql
    assert start.strftime("%Y-%m-%d %H:%M:%S") not in sql  # the settled ones are remembered
    assert (sum(first[lead.agent.pk]), sum(second[lead.agent.pk])) == (1, 2)
    assert (sum(first[backend.agent.pk]), sum(second[backend.agent.pk])) == (1, 2)
    assert second[lead.agent.pk][-1] == 1


def test_the_page_query_count_does_not_grow_with_agents(make_agent) -> None:
    make_agent("a0")
    client = operator_client()
    client.get("/my-team/parts/agents")  # the first also starts background work
    # Counted right away: the next request's start resets the connection's query log.
    with CaptureQueriesContext(connection) as queries:
        client.get("/my-team/parts/agents")
    few = len(queries)
    for n in range(1, 8):
        make_agent(f"a{n}").send("a0", "hi", f"r{n}")
    with CaptureQueriesContext(connection) as queries:
        client.get("/my-team/parts/agents")
    assert len(queries) == few


def test_the_strip_is_svg_with_96_classed_cells_each_titled(lead: AgentClient) -> None:
    """Cells are stretches of work, not messages: a quarter hour of work with no message is
    coloured, one with only a message is not (it gets the quieter mark); the active minutes
    come from the same stretches, and the legend names every mark, the red now included."""
    noon = datetime(2026, 3, 2, 12, 7, 30, tzinfo=UTC)
    with time_machine.travel(noon, tick=False):
        lead.send("lead", "note", "r1")  # in the last quarter hour, no work there
        worked = noon.replace(minute=0, second=0) - timedelta(hours=2)  # 10:00, no message
        WorkStretch.objects.create(
            agent=lead.agent,
            started_at=worked + timedelta(minutes=1),
            ended_at=worked + timedelta(minutes=12),
        )
        html = operator_client().get("/my-team/parts/agents").content.decode()
    svg = re.search(r'<svg class="strip" viewBox="0 0 96 2".*?</svg>', html, flags=re.S)
    assert svg
    cells = re.findall(
        r'<rect [^>]*class="cell([0-3])"><title>([^<]+)</title></rect>', svg.group(0)
    )
    assert len(cells) == 96
    start, _ = strip_window(noon)
    at_ten = int((worked - start) / timedelta(minutes=15))
    assert cells[at_ten] == ("3", "10:00 UTC: 11 min of work, 0 messages")
    assert [level for level, _ in cells].count("0") == 95
    assert cells[-1] == ("0", "12:00 UTC: no work, 2 messages")  # sent, and received
    assert svg.group(0).count('class="msg"') == 1 and 'class="now"' in svg.group(0)
    assert "11 min active today" in html
    legend = re.search(r'<p class="muted strip-legend">.*?</p>', html, flags=re.S).group(0)
    assert "minutes of work" in legend and 'class="msg"' in legend and 'class="now"' in legend
    assert "style=" not in svg.group(0) and "fill=" not in svg.group(0)
