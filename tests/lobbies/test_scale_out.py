"""Scale-out: two broker processes share one PostgreSQL database and one Redis channel layer.

A bridge on one process is pushed what the other accepted; read receipts come from whichever
process holds the dispatcher's PostgreSQL advisory lock; when that process is killed with
SIGKILL, the other one takes the lock over and delivers what was owed.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, no password) and Redis on 127.0.0.1:6379;
the module is skipped when either is unreachable (the fixtures of tests/scale_out_fixtures.py).

Two Redis-layer failures these tests caught: a bridge closed with 1011 after 5 s of quiet
(redis-py 8's 5 s socket timeout under channels_redis's 5 s blocking pop), and a dispatcher
whose cancelled channel receives overran and then ended its task while it kept the lock.
A missing receipt is reported with whether the lock holder is still ticking.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pocolobby.loops import LEADER_LOCK_KEY
from tests.bridge_client import Bridge, acknowledge, payload, send_message
from tests.scale_out import admin_connection, store_env
from tests.server import Broker

pytest_plugins = ("tests.scale_out_fixtures",)  # the database and redis_db fixtures
pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

# How each process names itself to PostgreSQL (libpq reads PGAPPNAME), to tell who leads.
APP_NAMES = {"a": "pocolobby-scale-a", "b": "pocolobby-scale-b"}
TAKEOVER_SECONDS = 10.0
RECEIPT_TIMEOUT = 15.0
STALL_SECONDS = 2.0


@dataclass
class Cluster:
    database: str
    a: Broker
    b: Broker

    def both(self) -> None:
        """A and B running, A started first (it prepares the schema on the very first start)."""
        for broker in (self.a, self.b):
            if not broker.running:
                broker.start()

    def _lock_holder(self) -> tuple[str, float] | None:
        """From pg_locks: the application name of the session holding the dispatcher's
        advisory lock, and how long that session has been idle (a leader runs SELECT 1 on it
        at every tick, so more than a second or two means its dispatcher stopped ticking)."""
        classid, objid = LEADER_LOCK_KEY >> 32, LEADER_LOCK_KEY & 0xFFFFFFFF
        with admin_connection(self.database) as conn:
            rows = conn.execute(
                "SELECT a.application_name, extract(epoch FROM now() - a.state_change)::float "
                "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = %s) "
                "AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1",
                [self.database, classid, objid],
            ).fetchall()
        assert len(rows) <= 1, rows
        return (rows[0][0], rows[0][1]) if rows else None

    def leader(self) -> Broker | None:
        """The process holding the dispatcher's advisory lock."""
        holder = self._lock_holder()
        if holder is None:
            return None
        brokers = {APP_NAMES["a"]: self.a, APP_NAMES["b"]: self.b}
        assert holder[0] in brokers, f"the lock is held by {holder[0]!r}"
        return brokers[holder[0]]

    def stalled_dispatcher(self) -> str | None:
        """A description if the lock holder's dispatcher has stopped ticking, else None."""
        holder = self._lock_holder()
        if holder is None or holder[1] < STALL_SECONDS:
            return None
        return f"{holder[0]} holds the lock, its lock session idle for {holder[1]:.1f}s"

    def name(self, broker: Broker | None) -> str:
        return {id(self.a): "A", id(self.b): "B"}.get(id(broker), "nobody")

    def wait_for_leader(
        self, expected: Broker | None = None, timeout: float = TAKEOVER_SECONDS
    ) -> tuple[Broker, Broker, float]:
        """(leader, follower, seconds waited) once `expected` (or either) holds the lock."""
        started = time.monotonic()
        while (holder := self.leader()) is None or expected not in (None, holder):
            waited = time.monotonic() - started
            assert waited < timeout, f"after {waited:.1f}s the lock is {self.name(holder)}'s"
            time.sleep(0.1)
        follower = self.b if holder is self.a else self.a
        return holder, follower, time.monotonic() - started

    def provision(self, lobby: str, agents: list[str], config_dir: Path) -> dict[str, str]:
        """With the real CLI through A; name -> token (valid on both: they share the store)."""
        configs = self.a.provision(lobby, agents, config_dir)
        return {name: config.token for name, config in configs.items()}


@pytest.fixture(scope="module")
def cluster(
    database: str, redis_db: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    token = f"pla_{secrets.token_urlsafe(24)}"
    shared = {**store_env(database, redis_db), "POCOLOBBY_ADMIN_TOKEN": token}
    a, b = (
        Broker(tmp_path_factory.mktemp(f"scale-{key}"), env={**shared, "PGAPPNAME": APP_NAMES[key]})
        for key in ("a", "b")
    )
    # The CLI reads the admin token from its data directory (it never sees the brokers' env).
    (a.data_dir / "admin-token").write_text(token + "\n")
    (a.data_dir / "admin-token").chmod(0o600)
    cluster = Cluster(database, a, b)
    try:
        cluster.both()
        yield cluster
    finally:
        for broker in (b, a):
            broker.stop()


async def receipts_notice(pair: Cluster, bridge: Bridge) -> dict:
    """The next frame, a receipts notice; if none comes, say whether the timers still run."""
    try:
        return await bridge.notice("receipts", timeout=RECEIPT_TIMEOUT)
    except AssertionError as failure:
        stalled = await asyncio.to_thread(pair.stalled_dispatcher)
        state = f"the dispatcher stopped ticking: {stalled}" if stalled else "timers tick"
        raise AssertionError(f"no receipts notice ({failure}); {state}") from None


@pytest.fixture
def pair(cluster: Cluster) -> Cluster:
    """Both processes up: a test before may have killed one."""
    cluster.both()
    return cluster


async def test_a_send_accepted_by_one_process_is_pushed_by_the_other(pair: Cluster, tmp_path: Path):
    tokens = await asyncio.to_thread(pair.provision, "relay-team", ["north", "south"], tmp_path)
    async with (
        await Bridge.connect(pair.b.url, tokens["south"]) as south,
        await Bridge.connect(pair.a.url, tokens["north"]) as north,
    ):
        await south.bootstrapped()
        await north.bootstrapped()
        for sender, via, bridge, name in (
            ("north", pair.a, south, "south"),
            ("south", pair.b, north, "north"),
        ):
            content = f"from {sender} via {via.url} to {name}"
            sent = await send_message(via.url, tokens[sender], name, content, f"relay-{sender}")
            notice = await bridge.notice("messages")
            assert notice["message_ids"] == [sent], notice
            (message,) = payload(notice)["messages"]
            assert (message["from"], message["content"]) == (sender, content)
            await bridge.report(notice, "received", "host_written")


async def test_a_read_receipt_crosses_processes_from_the_leader(pair: Cluster, tmp_path: Path):
    # In file order A leads (it started first): the bridge is on B, the send and the
    # acknowledgment go through A, whose dispatcher decides and reaches B through Redis.
    leader, follower, _ = await asyncio.to_thread(pair.wait_for_leader)
    tokens = await asyncio.to_thread(pair.provision, "receipt-team", ["asker", "reader"], tmp_path)
    async with await Bridge.connect(follower.url, tokens["asker"]) as asker:
        await asker.bootstrapped()
        sent = await send_message(
            leader.url, tokens["asker"], "reader", "seen?", "ask-1", notify_when_seen=True
        )
        await asker.nothing(0.5)  # nothing is owed before the recipient acknowledges
        acknowledged = time.monotonic()
        await acknowledge(leader.url, tokens["reader"], [sent])
        notice = await receipts_notice(pair, asker)
        waited = time.monotonic() - acknowledged
        assert notice["message_ids"] == [sent]
        (receipt,) = payload(notice)["receipts"]
        assert (receipt["message_id"], receipt["seen_by"]) == (sent, "reader")
        assert waited >= 1.5, f"the receipt came after {waited:.2f}s, before its 2 s wait"
        await asker.report(notice, "received", "host_written")
        await asker.nothing(1.0)  # once
    assert await asyncio.to_thread(pair.leader) is leader


async def test_the_other_process_takes_the_dispatcher_over_when_the_leader_is_killed(
    pair: Cluster, tmp_path: Path
):
    leader, follower, _ = await asyncio.to_thread(pair.wait_for_leader)
    tokens = await asyncio.to_thread(pair.provision, "failover-team", ["asker", "reader"], tmp_path)
    async with await Bridge.connect(follower.url, tokens["asker"]) as asker:
        await asker.bootstrapped()
        sent = await send_message(
            leader.url, tokens["asker"], "reader", "seen?", "ask-1", notify_when_seen=True
        )
        # A receipt is owed from here on; the leader holds it back 2 s and dies meanwhile.
        await acknowledge(leader.url, tokens["reader"], [sent])
        killed = time.monotonic()
        leader.kill9()
        _, _, takeover = await asyncio.to_thread(pair.wait_for_leader, follower)
        notice = await receipts_notice(pair, asker)
        delivered = time.monotonic() - killed
        assert notice["message_ids"] == [sent]
        assert payload(notice)["receipts"][0]["seen_by"] == "reader"
        await asker.report(notice, "received", "host_written")
        await asker.nothing(1.0)  # delivered once, not again

        # The survivor serves alone: a send it accepts reaches its bridge.
        reply = await send_message(follower.url, tokens["reader"], "asker", "yes", "reply-1")
        assert (await asker.notice("messages"))["message_ids"] == [reply]
    print(f"lock taken over {takeover:.2f}s after the kill; receipt after {delivered:.2f}s")

    # The killed process comes back as a follower: the lock stays where it is.
    await asyncio.to_thread(leader.start)
    await asyncio.sleep(3)
    assert await asyncio.to_thread(pair.leader) is follower


async def test_idle_bridges_on_both_processes_stay_connected_and_reachable(
    pair: Cluster, tmp_path: Path
):
    # A consumer's channel receive waits quietly longer than the layer's 5 s blocking pop.
    tokens = await asyncio.to_thread(pair.provision, "idle-team", ["east", "west"], tmp_path)
    async with (
        await Bridge.connect(pair.a.url, tokens["east"]) as east,
        await Bridge.connect(pair.b.url, tokens["west"]) as west,
    ):
        await east.bootstrapped()
        await west.bootstrapped()
        await asyncio.sleep(12)  # bridges whose agents have nothing to do for a while
        for bridge in (east, west):
            await bridge.roundtrip()
        assert await asyncio.to_thread(pair.stalled_dispatcher) is None  # the timers still run
        for sender, via, bridge, name in (
            ("east", pair.a, west, "west"),
            ("west", pair.b, east, "east"),
        ):
            sent = await send_message(via.url, tokens[sender], name, "awake?", f"idle-{sender}")
            assert (await bridge.notice("messages"))["message_ids"] == [sent]
