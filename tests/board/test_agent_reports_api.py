"""PUT /v1/usage, POST /v1/turns, PUT /v1/tokens: strict input, what is kept, what is shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone

from board.models import TokenSession, WorkStretch
from lobbies import usage
from lobbies.models import UsageReading
from tests.board.dashboard_helpers import operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db


def _call(agent: AgentClient, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    response = getattr(agent.client, method)(
        f"/v1/{path}",
        json.dumps(body) if not isinstance(body, str) else body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
    )
    return response.status_code, response.json()


def _reading(used_week: float = 40, week_resets_in: timedelta = timedelta(days=3), **extra):
    now = timezone.now()
    return {
        "five_hour": {
            "used_percentage": 58,
            "resets_at": int((now + timedelta(hours=2)).timestamp()),
        },
        "seven_day": {
            "used_percentage": used_week,
            "resets_at": int((now + week_resets_in).timestamp()),
        },
        **extra,
    }


def _usage_in_list_agents(agent: AgentClient) -> dict[str, Any] | None:
    listing = agent.ok("list_agents")
    return next(a for a in listing["agents"] if a["agent_id"] == agent.agent.agent_id)["usage"]


# ------------------------------------------------------------ usage


def test_a_reading_shows_in_list_agents_with_the_weekly_pace(lead: AgentClient) -> None:
    assert _usage_in_list_agents(lead) is None
    # 4 of 7 days passed: the even line is at 57.1%; 40% used is 17 points behind.
    status, body = _call(lead, "put", "usage", _reading(used_week=40))
    assert status == 200, body
    shown = _usage_in_list_agents(lead)
    assert shown["five_hour"]["left_percentage"] == 42
    assert shown["seven_day"]["used_percentage"] == 40
    assert shown["pace_points"] == pytest.approx(-17.1, abs=0.2)
    assert shown["off_pace"] is True
    assert shown["reading_age_seconds"] < 5


def test_within_five_points_of_the_even_line_is_on_pace(lead: AgentClient) -> None:
    _call(lead, "put", "usage", _reading(used_week=60))
    shown = _usage_in_list_agents(lead)
    assert abs(shown["pace_points"]) <= 5 and shown["off_pace"] is False


def test_only_the_latest_reading_is_kept(lead: AgentClient) -> None:
    _call(lead, "put", "usage", _reading(used_week=10))
    _call(lead, "put", "usage", _reading(used_week=70))
    assert _usage_in_list_agents(lead)["seven_day"]["used_percentage"] == 70


def test_the_same_reading_within_a_minute_is_not_written_again(
    lead: AgentClient, time_machine: Any
) -> None:
    time_machine.move_to(datetime(2026, 3, 4, 12, 0, tzinfo=UTC), tick=False)
    reading = _reading()
    _call(lead, "put", "usage", reading)
    first = UsageReading.objects.get(agent=lead.agent).received_at

    time_machine.shift(timedelta(seconds=30))
    assert _call(lead, "put", "usage", reading)[0] == 200
    assert UsageReading.objects.get(agent=lead.agent).received_at == first
    time_machine.shift(usage.REWRITE_AFTER)
    _call(lead, "put", "usage", reading)
    assert UsageReading.objects.get(agent=lead.agent).received_at == timezone.now()


def test_iso_reset_times_are_accepted(lead: AgentClient) -> None:
    body = _reading()
    body["seven_day"]["resets_at"] = (timezone.now() + timedelta(days=2)).isoformat()
    assert _call(lead, "put", "usage", body)[0] == 200


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            {"five_hour": {"used_percentage": 101, "resets_at": 1900000000}},
            "five_hour.used_percentage",
        ),
        (
            {"seven_day": {"used_percentage": "50", "resets_at": 1900000000}},
            "seven_day.used_percentage",
        ),
        ({"seven_day": {"used_percentage": 5, "resets_at": "next tuesday"}}, "seven_day.resets_at"),
        ({"seven_day": {"used_percentage": 5, "resets_at": 1900000000000}}, "seven_day.resets_at"),
        (
            {"seven_day": {"used_percentage": 5, "resets_at": "2026-03-01T10:00:00"}},
            "seven_day.resets_at",
        ),
        ({"account_email": "<script>"}, "account_email"),
        ({"plan": "max"}, "plan"),
        ({"five_hour": None}, "five_hour"),
    ],
)
def test_junk_readings_are_refused_naming_the_field_and_nothing_is_kept(
    lead: AgentClient, body: dict[str, Any], named: str
) -> None:
    status, answer = _call(lead, "put", "usage", {**_reading(), **body})
    assert status == 400
    assert named in answer["error"]["message"]
    assert _usage_in_list_agents(lead) is None


def test_usage_needs_an_agent_token_and_refuses_other_methods(lead: AgentClient) -> None:
    response = lead.client.put("/v1/usage", json.dumps(_reading()), content_type="application/json")
    assert response.status_code == 401
    assert _call(lead, "post", "usage", _reading())[0] == 405
    assert _call(lead, "put", "usage", "[1, 2]")[0] == 400
    assert _call(lead, "put", "usage", "{not json")[0] == 400


def test_accounts_group_agents_by_email_mark_old_readings_and_hide_day_old_ones(
    lead: AgentClient, backend: AgentClient, make_agent
) -> None:
    ops = make_agent("ops")
    _call(lead, "put", "usage", _reading(account_email="Team@Example.com"))
    _call(backend, "put", "usage", _reading(account_email="team@example.com"))
    _call(ops, "put", "usage", _reading(account_email="other@example.com"))
    client = operator_client()
    html = client.get("/my-team/parts/accounts").content.decode()
    assert html.count('<li class="account">') == 2
    assert (
        "<bdi>lead</bdi>, <bdi>backend</bdi>" in html
        or "<bdi>backend</bdi>, <bdi>lead</bdi>" in html
    )
    assert "stale" not in html

    readings = UsageReading.objects.all()
    readings.filter(agent=ops.agent).update(received_at=F("received_at") - timedelta(minutes=45))
    readings.exclude(agent=ops.agent).update(received_at=F("received_at") - timedelta(days=2))
    html = client.get("/my-team/parts/accounts").content.decode()
    assert "team@example.com" not in html  # older than a day: hidden
    assert "other@example.com" in html and "reading 45 min old" in html


def test_a_window_past_its_reset_is_dropped(lead: AgentClient) -> None:
    _call(lead, "put", "usage", _reading(account_email="a@example.com"))
    UsageReading.objects.filter(agent=lead.agent).update(
        five_hour_used=58, five_hour_resets_at=timezone.now() - timedelta(minutes=1)
    )
    html = operator_client().get("/my-team/parts/accounts").content.decode()
    assert "5 hours" not in html and "window seven-day" in html and "60% left" in html
    assert _usage_in_list_agents(lead)["five_hour"] is None


def test_pace_is_measured_from_the_week_start() -> None:
    resets = datetime(2026, 3, 8, tzinfo=UTC)
    window = usage.Window(50.0, resets)
    assert usage.pace_points(window, resets - timedelta(days=3.5)) == pytest.approx(0)
    assert usage.pace_points(window, resets - timedelta(days=7)) == pytest.approx(50)
    assert usage.pace_points(usage.Window(0, resets), resets) == pytest.approx(-100)


# ------------------------------------------------------------ turns


def test_start_opens_a_stretch_end_closes_it(lead: AgentClient) -> None:
    assert _call(lead, "post", "turns", {"event": "start"})[0] == 200
    assert WorkStretch.objects.get(agent=lead.agent).ended_at is None
    status, body = _call(lead, "post", "turns", {"event": "end"})
    assert status == 200 and body["stretch"]["ended_at"]
    assert WorkStretch.objects.get(agent=lead.agent).ended_at is not None


def test_a_start_closes_the_stretch_left_open(lead: AgentClient) -> None:
    _call(lead, "post", "turns", {"event": "start"})
    _call(lead, "post", "turns", {"event": "start"})
    assert WorkStretch.objects.filter(agent=lead.agent).count() == 2
    assert WorkStretch.objects.filter(agent=lead.agent, ended_at__isnull=True).count() == 1


def test_an_end_with_nothing_open_is_accepted_and_stores_nothing(lead: AgentClient) -> None:
    status, body = _call(lead, "post", "turns", {"event": "end"})
    assert status == 200 and body["stretch"] is None
    assert not WorkStretch.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"event": "begin"},
        {},
        {"event": "start", "at": "yesterday"},
        {"event": "start", "at": (timezone.now() + timedelta(hours=1)).isoformat()},
        {"event": "start", "at": (timezone.now() - timedelta(days=3)).isoformat()},
        {"event": "start", "extra": 1},
        {"event": ["start"]},
    ],
)
def test_junk_turns_are_refused_and_nothing_is_stored(lead: AgentClient, body) -> None:
    status, answer = _call(lead, "post", "turns", body)
    assert status == 400, answer
    assert not WorkStretch.objects.exists()


def test_today_active_minutes_show_on_the_row(lead: AgentClient) -> None:
    now = timezone.now()
    start = max(now - timedelta(minutes=50), now.replace(hour=0, minute=0, second=0, microsecond=0))
    WorkStretch.objects.create(
        agent=lead.agent, started_at=start, ended_at=start + timedelta(minutes=20)
    )
    WorkStretch.objects.create(
        agent=lead.agent,
        started_at=now - timedelta(days=2),
        ended_at=now - timedelta(days=2) + timedelta(hours=1),
    )
    minutes = int((min(start + timedelta(minutes=20), now) - start).total_seconds() // 60)
    html = operator_client().get("/my-team/parts/agents").content.decode()
    assert f"{minutes} min active today" in html


# ------------------------------------------------------------ tokens


def _day(day: str, session: str = "s-1", **counts) -> dict[str, Any]:
    return {"day": day, "session_id": session, **counts}


def test_tokens_resent_replace_their_session_day_and_sum_across_sessions(lead: AgentClient) -> None:
    today = timezone.now().date().isoformat()
    body = {"days": [_day(today, input_tokens=100, output_tokens=10)]}
    assert _call(lead, "put", "tokens", body)[0] == 200
    assert _call(lead, "put", "tokens", body)[0] == 200  # the same transcript again
    _call(
        lead, "put", "tokens", {"days": [_day(today, "s-2", input_tokens=5, cache_read_tokens=7)]}
    )
    assert TokenSession.objects.count() == 2
    html = operator_client().get("/my-team/tokens").content.decode()
    assert f'data-agent="lead" data-day="{today}"' in html
    assert 'data-total="122"' in html


def test_tokens_page_covers_the_last_14_days(lead: AgentClient) -> None:
    today = timezone.now().date()
    old, recent = today - timedelta(days=14), today - timedelta(days=13)
    _call(
        lead,
        "put",
        "tokens",
        {"days": [_day(old.isoformat(), input_tokens=1), _day(recent.isoformat(), input_tokens=2)]},
    )
    html = operator_client().get("/my-team/tokens").content.decode()
    assert recent.isoformat() in html and old.isoformat() not in html


@pytest.mark.parametrize(
    "body",
    [
        {"days": [_day("2026-02-30", input_tokens=1)]},
        {"days": [_day("20260301", input_tokens=1)]},
        {"days": [_day("2026-03-01", input_tokens=-1)]},
        {"days": [_day("2026-03-01", input_tokens=1.5)]},
        {"days": [_day("2026-03-01", session="../../etc", input_tokens=1)]},
        {"days": [_day("2026-03-01", input_tokens=1), _day("2026-03-01", input_tokens=2)]},
        {"days": [_day("2999-01-01", input_tokens=1)]},
        {"days": [{**_day("2026-03-01"), "surprise": 1}]},
        {"days": "all"},
    ],
)
def test_junk_token_reports_are_refused_and_nothing_is_stored(lead: AgentClient, body) -> None:
    status, answer = _call(lead, "put", "tokens", body)
    assert status == 400, answer
    assert not TokenSession.objects.exists()
