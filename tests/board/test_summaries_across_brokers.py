"""Three brokers on PostgreSQL and Redis summarize one lobby as one: a loopback Messages API
stand-in counts the requests, the store's attempt rows count the spend.

The dashboard is kept open on every broker at once: the test notes an opening every 0.2 s
and clears the row's start, so each broker's dashboard loop finds the lobby due on every
tick (faster than the page's real pace, which lets one broker start a lobby's work per 30 s)
and only the store's claim decides who calls the model. A new agent after each summary
changes the input, so every interval has something to summarize.

Shown: one request per claimed attempt and the attempts' starts at least the interval apart;
a broker SIGKILLed while its request is held open leaves a reservation that keeps the lobby
until it expires (no request meanwhile) and keeps its estimate on the bill; the day's spend
never above the $5 ceiling, which stops the requests once the next estimate would pass it;
and `list_agents` answers the same usage and pace on the three brokers.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.board.notes_fakes import MessagesStandIn
from tests.eventually import eventually
from tests.scale_out import admin_connection, store_env, usage_of
from tests.server import Broker, admin

pytest_plugins = ("tests.scale_out_fixtures",)  # the database and redis_db fixtures
pytestmark = pytest.mark.slow

INTERVAL = 3.0  # POCOLOBBY_SUMMARY_INTERVAL_SECONDS
EXPIRES = 8.0  # POCOLOBBY_SUMMARY_CLAIM_EXPIRES_SECONDS
CEILING = Decimal(5)  # board/summaries/prices.py, DAILY_CEILING_USD
NAMES = ("a", "b", "c")
LOBBY = "summary-race"
CEILING_LOGGED = "paused: its attempts reached the $5 daily ceiling"


@dataclass(frozen=True)
class Attempt:
    pk: int
    outcome: str
    cost: Decimal
    started: float  # epoch seconds
    error: str


@dataclass
class Trio:
    brokers: dict[str, Broker]
    stand_in: MessagesStandIn
    database: str
    admin_token: str
    spend_seen: list[Decimal] = field(default_factory=list)  # every 0.2 s while opened

    def admin(self, path: str, body: dict[str, Any]) -> Any:
        broker = next(b for b in self.brokers.values() if b.running)
        return admin(broker.url, self.admin_token, "POST", path, body)

    def connect(self) -> psycopg.Connection:
        return admin_connection(self.database)

    def attempts(self, lobby_id: int) -> list[Attempt]:
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT id, outcome, cost_usd, extract(epoch FROM started_at)::float, error "
                "FROM board_summaryattempt WHERE lobby_id = %s ORDER BY started_at, id",
                [lobby_id],
            ).fetchall()
        return [Attempt(*row) for row in rows]

    def keep_opened(self, lobby_id: int, stop: threading.Event) -> None:
        """The dashboard opened on every broker: the opening noted and its start cleared
        every 0.2 s; the day's spend read each time."""
        with self.connect() as conn:
            while not stop.is_set():
                conn.execute(
                    "INSERT INTO board_dashboardopening (lobby_id, opened_at, started_at) "
                    "VALUES (%s, now(), NULL) ON CONFLICT (lobby_id) "
                    "DO UPDATE SET opened_at = now(), started_at = NULL",
                    [lobby_id],
                )
                row = conn.execute(
                    "SELECT coalesce(sum(cost_usd), 0) FROM board_summaryattempt "
                    "WHERE lobby_id = %s AND started_at > now() - interval '24 hours'",
                    [lobby_id],
                ).fetchone()
                assert row is not None
                self.spend_seen.append(row[0])
                stop.wait(0.2)


@pytest.fixture(scope="module")
def trio(database: str, redis_db: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trio]:
    stand_in = MessagesStandIn().start()
    token = f"pla_{secrets.token_urlsafe(24)}"
    shared = {
        **store_env(database, redis_db),
        "POCOLOBBY_ADMIN_TOKEN": token,
        "ANTHROPIC_API_KEY": "sk-ant-api03-stand-in",
        "POCOLOBBY_SUMMARY_INTERVAL_SECONDS": str(INTERVAL),
        "POCOLOBBY_SUMMARY_CLAIM_EXPIRES_SECONDS": str(EXPIRES),
    }
    brokers = {
        name: Broker(
            tmp_path_factory.mktemp(f"summary-{name}"),
            env={**shared, "POCOLOBBY_ANTHROPIC_BASE_URL": stand_in.url_for(name)},
        )
        for name in NAMES
    }
    try:
        for broker in brokers.values():  # the first start prepares the store
            broker.start()
        yield Trio(brokers, stand_in, database, token)
    finally:
        for broker in reversed(brokers.values()):
            broker.stop()
        stand_in.stop()


def test_three_brokers_make_one_request_per_interval_and_stay_under_the_ceiling(
    trio: Trio, tmp_path: Path
) -> None:
    began = time.monotonic()
    trio.admin("/lobbies", {"name": LOBBY})
    tokens = {"lead": trio.admin(f"/lobbies/{LOBBY}/agents", {"agent_id": "lead"})["token"]}
    with trio.connect() as conn:
        row = conn.execute("SELECT id FROM lobbies_lobby WHERE name = %s", [LOBBY]).fetchone()
    assert row is not None
    lobby_id = int(row[0])
    added = 0

    def settled(count: int) -> list[Attempt] | None:
        """The lobby's attempts once `count` of them are settled and none is reserved."""
        attempts = trio.attempts(lobby_id)
        done = [a for a in attempts if a.outcome != "reserved"]
        return attempts if len(done) >= count and len(done) == len(attempts) else None

    def new_agent() -> None:
        nonlocal added
        added += 1
        agent = f"w{added}"
        tokens[agent] = trio.admin(f"/lobbies/{LOBBY}/agents", {"agent_id": agent})["token"]

    stop = threading.Event()
    opener = threading.Thread(target=trio.keep_opened, args=(lobby_id, stop), daemon=True)
    opener.start()
    try:
        # Three brokers race, three intervals: each summary is followed by a new input.
        for count in (1, 2, 3):
            eventually(lambda c=count: settled(c), what=f"summary {count}", timeout=30)
            if count == 3:
                trio.stand_in.hold_next()
            new_agent()
        raced = trio.attempts(lobby_id)
        assert [a.outcome for a in raced] == ["succeeded"] * 3
        assert trio.stand_in.count() == 3

        # A broker killed mid-call: its reservation holds the lobby until it expires.
        trio.stand_in.held.wait(timeout=30)
        assert trio.stand_in.held.is_set(), "no fourth request"
        killed_name = trio.stand_in.arrivals[-1].caller
        trio.brokers[killed_name].kill9()
        [reservation] = [a for a in trio.attempts(lobby_id) if a.outcome == "reserved"]
        # Leave room under the ceiling for about two and a half more attempts at this estimate
        # beside the dead one's, as if the day had already cost the rest (an hour ago).
        spent = sum((a.cost for a in trio.attempts(lobby_id)), Decimal(0))
        earlier = CEILING - spent - reservation.cost * Decimal("2.5")
        with trio.connect() as conn:
            conn.execute(
                "INSERT INTO board_summaryattempt (lobby_id, model, effort, input_hash, base_hash, "
                "message_ids, outcome, error, input_tokens, output_tokens, cost_usd, started_at, "
                "finished_at) VALUES (%s, 'claude-haiku-5-5', 'low', '', '', '[]', 'failed', "
                "'earlier today', 0, 0, %s, now() - interval '1 hour', now() - interval '1 hour')",
                [lobby_id, earlier],
            )
        trio.stand_in.release()
        after_kill = eventually(
            lambda: trio.stand_in.count() == 5 and trio.stand_in.arrivals[4],
            what="a request after the dead broker's reservation expired",
            timeout=EXPIRES + 30,
        )
        assert after_kill.at >= reservation.started + EXPIRES, (
            f"a request {after_kill.at - reservation.started:.1f}s after the dead one's claim"
        )
        assert after_kill.caller != killed_name
        expired = next(a for a in trio.attempts(lobby_id) if a.pk == reservation.pk)
        assert (expired.outcome, expired.cost) == ("failed", reservation.cost)

        # Until the ceiling: a new input after each summary, until a broker says it paused.
        survivors = [b for name, b in trio.brokers.items() if name != killed_name]

        def paused() -> bool:
            return any(CEILING_LOGGED in broker.log_text() for broker in survivors)

        while not paused():
            count = trio.stand_in.count()
            # Rows: one per request, and the earlier day's.
            eventually(lambda c=count: settled(c + 1), what="the last attempt settled", timeout=30)
            new_agent()
            eventually(
                lambda c=count: trio.stand_in.count() > c or paused(),
                what="a summary of the new input, or the ceiling",
                timeout=INTERVAL + 30,
            )
    finally:
        stop.set()
        opener.join(timeout=10)

    attempts = [a for a in trio.attempts(lobby_id) if a.error != "earlier today"]
    requests = trio.stand_in.arrivals
    assert len(requests) == len(attempts), "one request per claimed attempt"
    starts = [a.started for a in attempts]
    gaps = [then - first for first, then in itertools.pairwise(starts)]
    assert min(gaps) >= INTERVAL, gaps
    for request, attempt in zip(requests, attempts, strict=True):
        assert request.at >= attempt.started - 0.5, "a request before its claim"
    day = sum((a.cost for a in trio.attempts(lobby_id)), Decimal(0))
    assert max(trio.spend_seen) <= CEILING
    assert day <= CEILING
    assert day + reservation.cost * Decimal("1.1") > CEILING, "paused with room for another"
    print(
        f"\nrequests {len(requests)} by {[r.caller for r in requests]}, "
        f"claims apart {[round(g, 2) for g in gaps]} s (interval {INTERVAL} s), "
        f"expiry wait {after_kill.at - reservation.started:.1f} s (expires {EXPIRES} s), "
        f"day's spend ${day} of ${CEILING} (max seen ${max(trio.spend_seen)}), "
        f"{time.monotonic() - began:.1f} s"
    )

    # The killed broker back, the three answer list_agents with the same usage and pace.
    trio.brokers[killed_name].start()
    now = int(time.time())
    reading = {
        "five_hour": {"used_percentage": 58, "resets_at": now + 2 * 3600},
        "seven_day": {"used_percentage": 40, "resets_at": now + 3 * 86400},
    }
    stored = httpx.put(
        f"{trio.brokers['a'].url}/v1/usage",
        json=reading,
        headers={"Authorization": f"Bearer {tokens['lead']}"},
        timeout=10,
    )
    assert stored.status_code == 200, stored.text
    shown = {name: usage_of(b, tokens["w1"], "lead") for name, b in trio.brokers.items()}
    told = stored.json()["usage"]
    for name, usage in shown.items():
        assert usage is not None, name
        for key in ("five_hour", "seven_day", "pace_points", "off_pace"):
            assert usage[key] == told[key], (name, key)
