"""One summary decision per lobby across broker processes: an attempt is claimed in the store
(a reserved row, written under the store's write lock with the interval and the day's ceiling
checked) before the model is called, and settled after. Claimers are threads, each with its own
database connection, as two brokers would be; the file runs on SQLite and, in the suite's
PostgreSQL pass, on PostgreSQL (two real connections)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from board.models import AttemptOutcome, SummaryAttempt, SummaryModel
from board.summaries import attempts, prices, prompt, runs
from lobbies.models import Lobby
from tests.board.notes_fakes import FakeClaude
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def team(time_machine: Any, lobby: Lobby, lead: AgentClient, backend: AgentClient) -> Lobby:
    time_machine.move_to(START, tick=False)
    backend.send("lead", "sweep done", "r1", kind="report")
    return lobby


def reservation(lobby: Lobby, *, cost: str, minutes_ago: float) -> SummaryAttempt:
    """What a broker killed mid-call leaves: a reserved attempt at its estimated cost."""
    at = timezone.now() - timedelta(minutes=minutes_ago)
    return SummaryAttempt.objects.create(
        lobby=lobby,
        model=SummaryModel.HAIKU,
        effort="low",
        input_hash="e" * 64,
        outcome=AttemptOutcome.RESERVED,
        cost_usd=Decimal(cost),
        started_at=at,
        finished_at=at,
    )


def in_threads(count: int, work: Callable[[], str]) -> list[str]:
    """`work` in `count` threads at once, each on its own connection, closed after."""

    def run() -> str:
        try:
            return work()
        finally:
            connection.close()

    with ThreadPoolExecutor(count) as pool:
        return sorted(f.result(timeout=60) for f in [pool.submit(run) for _ in range(count)])


def test_two_claimers_at_once_make_one_request(
    team: Lobby, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both pass the first look and build the request before either claims: the race is
    # decided in the claim's transaction, not by the first look.
    both_built = threading.Barrier(2, timeout=20)
    build = prompt.build_request

    def build_then_wait(lobby_id: int) -> prompt.BuiltRequest | None:
        built = build(lobby_id)
        both_built.wait()
        return built

    monkeypatch.setattr(runs, "build_request", build_then_wait)

    # Each thread stands for a broker process: it runs the rules past anything one process
    # could keep in its memory, so only the store can decide.
    statuses = in_threads(2, lambda: runs._maybe(team.pk))

    assert statuses == ["busy", "succeeded"]
    assert claude.route.call_count == 1
    [attempt] = SummaryAttempt.objects.filter(lobby=team)
    assert (attempt.outcome, attempt.cost_usd) == (AttemptOutcome.SUCCEEDED, Decimal("0.002"))


def test_a_live_reservation_holds_the_lobby_and_an_expired_one_frees_it(
    team: Lobby, claude: FakeClaude, time_machine: Any
) -> None:
    killed = reservation(team, cost="0.05", minutes_ago=3)

    assert runs.maybe_summarize(team) == "busy"
    time_machine.shift(attempts.CLAIM_EXPIRES)
    assert runs.maybe_summarize(team) == "interval"  # it started less than 10 min ago
    assert claude.route.call_count == 0

    time_machine.shift(attempts.SUMMARY_INTERVAL - attempts.CLAIM_EXPIRES)
    assert runs.maybe_summarize(team) == "succeeded"

    assert claude.route.call_count == 1
    killed.refresh_from_db()
    assert (killed.outcome, killed.error, killed.cost_usd) == (
        AttemptOutcome.FAILED,
        attempts.BROKER_STOPPED,
        Decimal("0.05"),  # never a free run: its estimate still counts
    )
    assert runs.cost_since(team.pk, timezone.now() - timedelta(days=1)) == Decimal("0.052")


def test_a_reservation_that_would_pass_the_ceiling_is_refused(
    team: Lobby, claude: FakeClaude
) -> None:
    built = prompt.build_request(team.pk)
    assert built is not None
    estimate = prices.estimated_cost(built)
    reservation(team, cost=str(prices.DAILY_CEILING_USD - estimate / 2), minutes_ago=11)

    assert runs.maybe_summarize(team) == "ceiling"

    assert claude.route.call_count == 0
    assert list(SummaryAttempt.objects.values_list("outcome", flat=True)) == [AttemptOutcome.FAILED]
