"""The scale-out layout for real: two brokers on PostgreSQL and Redis behind Debian's Caddy,
run from docs/OPERATIONS.md's scale-out Caddyfile (two upstreams, WebSocket-aware, health
checked). A message sent through one broker is pushed through the other; one broker is
SIGKILLed while messages flow and its real bridges reconnect through Caddy to the survivor,
with nothing lost and nothing pushed twice.

Needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (skipped without them, like
tests/lobbies/test_scale_out.py: the fixtures of tests/scale_out_fixtures.py).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.bridge.host import Host
from tests.bridge_client import Bridge, payload
from tests.deploy.caddy import Caddy, PostmarkStandIn, doc_caddyfile
from tests.deploy.conftest import (
    POSTMARK_TOKEN,
    Deployment,
    bridge_env,
    hosted_env,
    write_bridge_config,
)
from tests.scale_out import admin_connection, store_env
from tests.server import Broker, free_port

pytest_plugins = ("tests.scale_out_fixtures",)  # the database and redis_db fixtures
pytestmark = pytest.mark.slow

UPSTREAM_HEADER = "X-PocoLobby-Broker"
AGENTS = ("w1", "w2", "w3", "w4")


@pytest.fixture(scope="module")
def cluster(
    database: str,
    redis_db: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """Brokers A and B (same store, same Redis, same secrets) behind one Caddy."""
    postmark = PostmarkStandIn(POSTMARK_TOKEN).start()
    https_port, port_a, port_b = free_port(), free_port(), free_port()
    domain = f"pocolobby.localhost:{https_port}"
    caddy = Caddy(
        doc_caddyfile(
            1,
            domain,
            {"10.0.0.11:8787": f"127.0.0.1:{port_a}", "10.0.0.12:8787": f"127.0.0.1:{port_b}"},
        ),
        tmp_path_factory.mktemp("caddy-scale"),
        server_name="api.pocolobby.localhost",
        https_port=https_port,
        http_port=free_port(),
    )
    shared = {
        **hosted_env(domain, postmark, f"api.{domain},127.0.0.1:{port_a},127.0.0.1:{port_b}"),
        **store_env(database, redis_db),
        "POCOLOBBY_SECRET_KEY": secrets.token_urlsafe(32),
        # One sender drives the load; the per-agent send limit is not what is tested here.
        "POCOLOBBY_SENDS_PER_MINUTE": "100000",
    }
    brokers = [
        Broker(tmp_path_factory.mktemp(f"scale-{key}"), port=port, env=shared)
        for key, port in (("a", port_a), ("b", port_b))
    ]
    try:
        for broker in brokers:
            broker.start()
        caddy.start()
        yield Deployment(brokers, caddy, postmark, domain)
    finally:
        caddy.stop()
        for broker in reversed(brokers):
            broker.stop()
        postmark.stop()


@dataclass
class Team:
    lobby: str
    tokens: dict[str, str]


def make_team(cluster: Deployment, lobby: str, agents: tuple[str, ...]) -> Team:
    cluster.admin("POST", "/lobbies", {"name": lobby})
    tokens = {
        name: cluster.admin("POST", f"/lobbies/{lobby}/agents", {"agent_id": name})["token"]
        for name in agents
    }
    return Team(lobby, tokens)


def upstream_port(headers: Any) -> int:
    return int(str(headers[UPSTREAM_HEADER]).rsplit(":", 1)[1])


async def wait_healthy(cluster: Deployment, broker: Broker, timeout: float = 15.0) -> None:
    """Until a request through Caddy has been answered by `broker` (its health check passed)."""
    deadline = time.monotonic() + timeout
    async with cluster.async_client() as client:
        while time.monotonic() < deadline:
            response = await client.get(f"{cluster.api_url}/v1/health")
            if response.status_code == 200 and upstream_port(response.headers) == broker.port:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"Caddy never sent a request to {broker.url}")


@pytest.mark.asyncio
@pytest.mark.usefixtures("loopback_names")
async def test_a_message_sent_through_one_broker_is_pushed_through_the_other(
    cluster: Deployment, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SSL_CERT_FILE", str(cluster.caddy.root_cert))  # for the socket's TLS
    for broker in cluster.brokers:
        await wait_healthy(cluster, broker)
    team = await asyncio.to_thread(make_team, cluster, "relay", ("north", "south"))
    # Caddy picks an upstream per request; the bridge's socket is on one of the two, so
    # once both brokers have answered sends, some of them crossed through Redis.
    answered_by: Counter[int] = Counter()
    async with await Bridge.connect(cluster.api_url, team.tokens["south"]) as south:
        await south.bootstrapped()
        async with cluster.async_client() as client:
            for i in range(40):
                response = await client.post(
                    f"{cluster.api_url}/v1/messages",
                    json={"to": "south", "content": f"hello {i}", "client_request_id": f"r-{i}"},
                    headers={"Authorization": f"Bearer {team.tokens['north']}"},
                )
                assert response.status_code == 200, response.text
                notice = await south.notice("messages")
                assert notice["message_ids"] == [response.json()["message_id"]]
                assert payload(notice)["messages"][0]["content"] == f"hello {i}"
                await south.report(notice, "received", "host_written")
                answered_by[upstream_port(response.headers)] += 1
                if min(answered_by[b.port] for b in cluster.brokers) >= 2:
                    break
        await south.nothing(0.5)
    assert min(answered_by[b.port] for b in cluster.brokers) >= 2, answered_by


@dataclass
class Sent:
    to: str
    key: str
    message_id: int | None = None
    attempts: int = 0
    # Why each failed attempt failed, and after how long (for the printed figures).
    failures: list[str] = field(default_factory=list)


async def send_until_answered(client: httpx.AsyncClient, url: str, token: str, sent: Sent) -> None:
    """A send cut off by the kill has an unknown outcome: retry with the same key until
    answered (a retry of a stored one answers `duplicate: true` with the same id)."""
    while sent.message_id is None:
        sent.attempts += 1
        began = time.perf_counter()
        try:
            response = await client.post(
                f"{url}/v1/messages",
                json={"to": sent.to, "content": sent.key, "client_request_id": sent.key},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.TransportError as error:
            sent.failures.append(f"{type(error).__name__} after {time.perf_counter() - began:.2f}s")
            await asyncio.sleep(0.1)
            continue
        if response.status_code == 200:
            sent.message_id = int(response.json()["message_id"])
        else:
            assert response.status_code in (502, 503, 504), response.text
            sent.failures.append(
                f"{response.status_code} after {time.perf_counter() - began:.2f}s from "
                f"{response.headers.get(UPSTREAM_HEADER, 'Caddy')}: {response.text[:100]!r}"
            )
            await asyncio.sleep(0.1)


def database_name(cluster: Deployment) -> str:
    return cluster.broker.extra_env["DATABASE_URL"].rsplit("/", 1)[1]


def stored_sends(dbname: str, lobby: str) -> Counter[str]:
    """How many times each client_request_id is stored in the lobby."""
    with admin_connection(dbname) as connection:
        rows = connection.execute(
            "SELECT m.client_request_id FROM lobbies_message m JOIN lobbies_lobby l "
            "ON l.id = m.lobby_id WHERE l.name = %s",
            [lobby],
        ).fetchall()
    return Counter(str(row[0]) for row in rows)


@pytest.mark.asyncio
@pytest.mark.usefixtures("loopback_names")
async def test_a_broker_killed_under_load_loses_nothing_and_its_bridges_move_to_the_survivor(
    cluster: Deployment, tmp_path: Path
):
    doomed, survivor = cluster.brokers
    for broker in cluster.brokers:
        if not broker.running:
            await asyncio.to_thread(broker.start)
    # Every bridge on the doomed broker: the survivor is down while they connect.
    await asyncio.to_thread(survivor.stop)
    team = await asyncio.to_thread(make_team, cluster, "storm", ("sender", *AGENTS))
    hosts = []
    for name in AGENTS:
        config = write_bridge_config(
            cluster.api_url, team.lobby, name, team.tokens[name], tmp_path / f"{name}.json"
        )
        hosts.append(
            Host(
                config,
                str(uuid.uuid4()),
                tmp_path / f"{name}.log",
                extra_env=bridge_env(cluster.caddy),
            )
        )
    for host in hosts:
        await host.start()
    try:
        for host in hosts:
            await host.bootstrap()
        await asyncio.to_thread(survivor.start)
        await wait_healthy(cluster, survivor)

        sends: list[Sent] = []
        stop = asyncio.Event()
        repushes = 0

        async def load(client: httpx.AsyncClient) -> None:
            i = 0
            while not stop.is_set():
                sent = Sent(AGENTS[i % len(AGENTS)], f"load-{i}")
                sends.append(sent)
                await send_until_answered(client, cluster.api_url, team.tokens["sender"], sent)
                i += 1
                await asyncio.sleep(0.02)

        async with cluster.async_client() as client:
            flow = asyncio.create_task(load(client))
            await asyncio.sleep(3)
            await asyncio.to_thread(doomed.kill9)
            killed_at = time.perf_counter()  # it is gone (SIGKILLed and reaped)
            # One message per bridge sent right after the kill: when each arrives, that
            # bridge is back (through Caddy, on the survivor).
            after = [Sent(name, f"after-kill-{name}") for name in AGENTS]
            await asyncio.gather(
                *(
                    send_until_answered(client, cluster.api_url, team.tokens["sender"], s)
                    for s in after
                )
            )
            answered = time.perf_counter()
            arrivals = await asyncio.gather(
                *(
                    host.message_event(s.message_id, timeout=60)
                    for host, s in zip(hosts, after, strict=True)
                    if s.message_id is not None
                )
            )
            reconnected = max(event.at for event in arrivals)
            await asyncio.sleep(3)
            stop.set()
            await flow
        sends.extend(after)

        # In the store: every answered send exactly once, nothing else (the chaos soak's check).
        stored = await asyncio.to_thread(stored_sends, database_name(cluster), team.lobby)
        assert stored == Counter({s.key: 1 for s in sends}), "a send lost or stored twice"
        for host, name in zip(hosts, AGENTS, strict=True):
            expected = {s.message_id for s in sends if s.to == name}
            for message_id in expected:
                await host.message_event(message_id, timeout=30)
            await host.nothing_more(1.0)
            arrivals: dict[int, list[float]] = {}
            for event in host.events:
                if event.meta.get("scope") != "bootstrap":
                    for message_id in event.message_ids:
                        arrivals.setdefault(message_id, []).append(event.at)
            lost = expected - set(arrivals)
            strangers = set(arrivals) - expected
            # A notice written to the host whose host_written the killed broker had not
            # recorded is pushed again after the reconnect, by design (at least once): one
            # arrival before the kill and one after. Anything else twice is a duplicate.
            repushed = {
                m for m, at in arrivals.items() if len(at) == 2 and at[0] < killed_at < at[1]
            }
            twice = {m: at for m, at in arrivals.items() if len(at) > 1 and m not in repushed}
            detail = [
                (round(e.at - killed_at, 3), e.meta.get("scope"), e.headline[:60], e.message_ids)
                for e in host.events
                if set(e.message_ids) & set(twice)
            ]
            assert (lost, twice, strangers) == (set(), {}, set()), (name, lost, detail, strangers)
            repushes += len(repushed)
            context = await host.ok("get_context")
            assert context["bridge"]["generation"] == 1  # a reconnect, not a new runtime
    finally:
        for host in reversed(hosts):
            await host.close()
        if not doomed.running:
            await asyncio.to_thread(doomed.start)
    failures = Counter(re.sub(r" after [0-9.]+s", "", f) for s in sends for f in s.failures)
    print(
        f"{len(sends)} messages to {len(AGENTS)} bridges, 0 lost, 0 stored twice, {repushes} "
        "re-pushed across the kill (host_written unrecorded); "
        f"{sum(s.attempts > 1 for s in sends)} sends retried after the kill; every bridge "
        f"had a message sent after the kill {reconnected - killed_at:.2f}s after it (the sends "
        f"were answered through Caddy {answered - killed_at:.2f}s after it)"
        f"; failed attempts: {dict(failures)}"
    )
