"""Caddy's 503s after a broker is SIGKILLed: the scale-out kill scenario, N runs per recipe.

    .venv/bin/python benchmarks/caddy_kill.py [--runs 14] [--recipes before,after]
        [--recipe NAME=FILE ...]

The scenario of tests/deploy/test_caddy_scale_out.py's kill test, repeated: two brokers
(`pocolobby serve`) on one PostgreSQL database and one Redis database behind Debian's Caddy,
four real bridges (tests/bridge/host.py) connected through Caddy to broker A (B is stopped
while they connect, then started again), one sender posting messages through Caddy without
pause; after 3 s broker A is SIGKILLed, one message per bridge is sent at once, and the run
waits until every bridge was pushed its message (through Caddy, on B). Each run starts a
fresh Caddy from the recipe's Caddyfile; the brokers are kept and A is started again after
its kill.

Recipes: `before` is the scale-out Caddyfile as it was before issue 43 (passive health
checks with `fail_duration 10s`), `after` is docs/OPERATIONS.md's scale-out Caddyfile as it
is now; `--recipe NAME=FILE` adds a Caddyfile with the doc's placeholders. The runs of the
recipes alternate, so both see the same machine.

Per run it prints how long after the kill Caddy itself answered 503 (no upstream header:
"no upstreams available"), how many such answers there were, the other failed attempts
(502: a request cut off inside the killed broker), and when every bridge had its message.
Then per recipe: min / median / max of the 503 time and how many runs had any 503. The kill's
moment is taken once the SIGKILLed process is reaped, so an attempt cut off by the kill can
end a few hundredths of a second "before" it.

Needs PostgreSQL on 127.0.0.1:5432, Redis on 127.0.0.1:6379 and caddy.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.bridge.host import Host
from tests.deploy.caddy import Caddy, PostmarkStandIn, doc_caddyfiles
from tests.deploy.conftest import (
    ADMIN_TOKEN,
    POSTMARK_TOKEN,
    _loopback_for_localhost,
    bridge_env,
    hosted_env,
    write_bridge_config,
)
from tests.server import Broker, admin, free_port

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
UPSTREAM_HEADER = "X-PocoLobby-Broker"
AGENTS = ("w1", "w2", "w3", "w4")
LOAD_BEFORE_KILL = 3.0
LOAD_AFTER_MOVE = 3.0
MOVE_TIMEOUT = 60.0
# The scale-out Caddyfile of docs/OPERATIONS.md before issue 43 (commit ed8bb49).
BEFORE = """\
# /etc/caddy/Caddyfile
pocolobby.example.com, *.pocolobby.example.com {
    tls /etc/caddy/pocolobby/fullchain.pem /etc/caddy/pocolobby/privkey.pem
    reverse_proxy 10.0.0.11:8787 10.0.0.12:8787 {
        lb_try_duration 5s
        fail_duration 10s
        health_uri /v1/health
        health_interval 2s
        health_headers {
            Host api.pocolobby.example.com
        }
        header_down X-PocoLobby-Broker {http.reverse_proxy.upstream.hostport}
    }
}
"""
DOC_TLS = "tls /etc/caddy/pocolobby/fullchain.pem /etc/caddy/pocolobby/privkey.pem"


def caddyfile(recipe: str, domain: str, port_a: int, port_b: int) -> str:
    """The recipe with the doc's placeholders replaced, as tests/deploy does."""
    replacements = {
        DOC_TLS: "tls internal",
        "pocolobby.example.com": domain,
        "10.0.0.11:8787": f"127.0.0.1:{port_a}",
        "10.0.0.12:8787": f"127.0.0.1:{port_b}",
    }
    for placeholder, value in replacements.items():
        if placeholder not in recipe:
            raise SystemExit(f"the recipe has no {placeholder!r}")
        recipe = recipe.replace(placeholder, value)
    return recipe


@dataclass
class Attempt:
    status: int | None  # None: a transport error
    upstream: str | None
    ended: float


@dataclass
class Send:
    to: str
    key: str
    message_id: int | None = None
    attempts: list[Attempt] = field(default_factory=list)


@dataclass
class RunResult:
    recipe: str
    seconds_503: float  # from the kill to the end of Caddy's last own 503, 0 without one
    count_503: int
    other_failures: Counter[str]
    last_failure: float  # from the kill to the end of the last failed attempt of any kind
    moved_after: float | None  # every bridge had its message this long after the kill
    problem: str = ""


class Cluster:
    """Brokers A and B on one PostgreSQL database and one Redis database, and the Caddy
    ports and home every run reuses."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.database = f"pocolobby_caddy_kill_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.database}"')
        self.redis_db = self._claim_redis()
        self.postmark = PostmarkStandIn(POSTMARK_TOKEN).start()
        self.https_port, self.http_port = free_port(), free_port()
        self.domain = f"pocolobby.localhost:{self.https_port}"
        port_a, port_b = free_port(), free_port()
        env = {
            **hosted_env(
                self.domain,
                self.postmark,
                f"api.{self.domain},127.0.0.1:{port_a},127.0.0.1:{port_b}",
            ),
            "DATABASE_URL": f"{PG_SERVER}/{self.database}",
            "REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{self.redis_db}",
            "POCOLOBBY_SECRET_KEY": secrets.token_urlsafe(32),
            "POCOLOBBY_SENDS_PER_MINUTE": "100000",
        }
        self.a = Broker(home / "broker-a", port=port_a, env=env)
        self.b = Broker(home / "broker-b", port=port_b, env=env)
        self.caddy: Caddy | None = None

    @staticmethod
    def _claim_redis() -> int:
        for number in range(15, 0, -1):
            client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=number)
            if client.dbsize() == 0 and client.set("caddy-kill-claim", "1", nx=True, ex=7200):
                return number
        raise SystemExit("no empty Redis database number")

    @property
    def api_url(self) -> str:
        return f"https://api.{self.domain}"

    def start_caddy(self, recipe: str) -> Caddy:
        self.caddy = Caddy(
            caddyfile(recipe, self.domain, self.a.port, self.b.port),
            self.home / "caddy",
            server_name="api.pocolobby.localhost",
            https_port=self.https_port,
            http_port=self.http_port,
        ).start()
        return self.caddy

    def stop_caddy(self) -> None:
        if self.caddy is not None:
            self.caddy.stop()
            self.caddy = None

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        broker = self.a if self.a.running else self.b
        return admin(broker.url, ADMIN_TOKEN, method, path, body)

    def client(self) -> httpx.AsyncClient:
        assert self.caddy is not None
        return httpx.AsyncClient(verify=self.caddy.ssl_context(), timeout=10)

    def close(self) -> None:
        self.stop_caddy()
        for broker in (self.a, self.b):
            broker.stop()
        self.postmark.stop()
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [self.database],
            )
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}"')
        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=self.redis_db).flushdb()


async def send_until_answered(client: httpx.AsyncClient, url: str, token: str, send: Send) -> None:
    """Retry a send under its key until answered (a cut-off send has an unknown outcome)."""
    while send.message_id is None:
        try:
            response = await client.post(
                f"{url}/v1/messages",
                json={"to": send.to, "content": send.key, "client_request_id": send.key},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.TransportError:
            send.attempts.append(Attempt(None, None, time.perf_counter()))
            await asyncio.sleep(0.1)
            continue
        send.attempts.append(
            Attempt(
                response.status_code, response.headers.get(UPSTREAM_HEADER), time.perf_counter()
            )
        )
        if response.status_code == 200:
            send.message_id = int(response.json()["message_id"])
        elif response.status_code in (502, 503, 504):
            await asyncio.sleep(0.1)
        else:
            raise SystemExit(f"send answered {response.status_code}: {response.text}")


async def wait_answered_by(cluster: Cluster, broker: Broker, timeout: float = 15.0) -> None:
    """Until a request through Caddy was answered by `broker` (its health check passed)."""
    deadline = time.monotonic() + timeout
    async with cluster.client() as client:
        while time.monotonic() < deadline:
            response = await client.get(f"{cluster.api_url}/v1/health")
            upstream = response.headers.get(UPSTREAM_HEADER, "")
            if response.status_code == 200 and upstream.endswith(f":{broker.port}"):
                return
            await asyncio.sleep(0.1)
    raise SystemExit(f"Caddy never sent a request to {broker.url}")


async def one_run(cluster: Cluster, name: str, recipe: str, number: int, logs: Path) -> RunResult:
    doomed, survivor = cluster.a, cluster.b
    for broker in (doomed, survivor):
        if not broker.running:
            await asyncio.to_thread(broker.start)
    caddy = await asyncio.to_thread(cluster.start_caddy, recipe)
    # Every bridge on the doomed broker: the survivor is down while they connect.
    await asyncio.to_thread(survivor.stop)
    lobby = f"kill{number}"
    await asyncio.to_thread(cluster.admin, "POST", "/lobbies", {"name": lobby})
    tokens = {
        agent: (
            await asyncio.to_thread(
                cluster.admin, "POST", f"/lobbies/{lobby}/agents", {"agent_id": agent}
            )
        )["token"]
        for agent in ("sender", *AGENTS)
    }
    hosts = [
        Host(
            write_bridge_config(
                cluster.api_url, lobby, agent, tokens[agent], logs / f"{lobby}-{agent}.json"
            ),
            str(uuid.uuid4()),
            logs / f"{lobby}-{agent}.log",
            extra_env=bridge_env(caddy),
        )
        for agent in AGENTS
    ]
    sends: list[Send] = []
    moved_after: float | None = None
    problem = ""
    try:
        for host in hosts:
            await host.start()
        for host in hosts:
            await host.bootstrap()
        await asyncio.to_thread(survivor.start)
        await wait_answered_by(cluster, survivor)
        stop = asyncio.Event()

        async def load(client: httpx.AsyncClient) -> None:
            i = 0
            while not stop.is_set():
                send = Send(AGENTS[i % len(AGENTS)], f"load-{i}")
                sends.append(send)
                await send_until_answered(client, cluster.api_url, tokens["sender"], send)
                i += 1
                await asyncio.sleep(0.02)

        async with cluster.client() as client:
            flow = asyncio.create_task(load(client))
            await asyncio.sleep(LOAD_BEFORE_KILL)
            await asyncio.to_thread(doomed.kill9)
            killed_at = time.perf_counter()
            after = [Send(agent, f"after-kill-{agent}") for agent in AGENTS]
            sends.extend(after)
            await asyncio.gather(
                *(send_until_answered(client, cluster.api_url, tokens["sender"], s) for s in after)
            )
            try:
                arrivals = await asyncio.gather(
                    *(
                        host.message_event(s.message_id, timeout=MOVE_TIMEOUT)
                        for host, s in zip(hosts, after, strict=True)
                        if s.message_id is not None
                    )
                )
                moved_after = max(event.at for event in arrivals) - killed_at
            except AssertionError as error:
                problem = f"a bridge did not move: {str(error)[:300]}"
            await asyncio.sleep(LOAD_AFTER_MOVE)
            stop.set()
            await flow
    finally:
        for host in reversed(hosts):
            await host.close()
        await asyncio.to_thread(cluster.stop_caddy)
        caddy.log_path.rename(logs / f"{lobby}-{name}-caddy.log")
    own_503 = [
        a.ended
        for s in sends
        for a in s.attempts
        if a.status == 503 and a.upstream is None and a.ended >= killed_at
    ]
    others = Counter(
        f"{a.status or 'transport error'}{'' if a.upstream else ' from Caddy'}"
        for s in sends
        for a in s.attempts
        if a.status != 200 and not (a.status == 503 and a.upstream is None)
    )
    failed = [a.ended for s in sends for a in s.attempts if a.status != 200]
    return RunResult(
        name,
        max(own_503, default=killed_at) - killed_at,
        len(own_503),
        others,
        max(failed, default=killed_at) - killed_at,
        moved_after,
        problem,
    )


def summary(results: list[RunResult]) -> str:
    times = sorted(r.seconds_503 for r in results)
    with_503 = [t for t in times if t > 0]
    failing = sorted(r.last_failure for r in results)
    others = sum((r.other_failures for r in results), Counter[str]())
    moved = sorted(r.moved_after for r in results if r.moved_after is not None)
    not_moved = sum(r.moved_after is None for r in results)
    return (
        f"503 time after the kill: min {times[0]:.2f} s, median {statistics.median(times):.2f} s,"
        f" max {times[-1]:.2f} s; runs with any 503: {len(with_503)} / {len(times)}"
        f" ({', '.join(f'{t:.2f}' for t in with_503) or 'none'}); bridges moved in"
        f" {moved[0] if moved else 0:.2f}-{moved[-1] if moved else 0:.2f} s"
        f" (median {statistics.median(moved) if moved else 0:.2f} s)"
        + f"; other failed attempts {dict(others)} in all, failed attempts of any kind ended"
        f" {failing[0]:.2f}-{failing[-1]:.2f} s after the kill"
        f" (median {statistics.median(failing):.2f} s)"
        + (
            f", {not_moved} runs where a bridge did not move within {MOVE_TIMEOUT:.0f} s"
            if not_moved
            else ""
        )
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=14, help="runs per recipe")
    parser.add_argument("--recipes", default="before,after", help="which recipes, in order")
    parser.add_argument(
        "--recipe", action="append", default=[], metavar="NAME=FILE", help="another recipe"
    )
    parser.add_argument("--keep", type=Path, help="keep the bridges' and Caddy's logs here")
    args = parser.parse_args()
    recipes = {"before": BEFORE, "after": doc_caddyfiles()[1]}
    for item in args.recipe:
        name, _, path = item.partition("=")
        recipes[name] = Path(path).read_text()
    names = [n for n in args.recipes.split(",") if n] + [
        item.partition("=")[0] for item in args.recipe
    ]
    socket.getaddrinfo = _loopback_for_localhost
    with tempfile.TemporaryDirectory(prefix="caddy-kill-") as tmp:
        home = args.keep or Path(tmp)
        home.mkdir(parents=True, exist_ok=True)
        cluster = Cluster(home)
        results: dict[str, list[RunResult]] = {n: [] for n in names}
        try:
            for run in range(args.runs):
                for name in names:
                    result = await one_run(
                        cluster, name, recipes[name], run * len(names) + names.index(name), home
                    )
                    results[name].append(result)
                    print(
                        f"{name:>8} run {run + 1:2}: 503 for {result.seconds_503:5.2f} s after"
                        f" the kill ({result.count_503} answers); bridges moved in "
                        + (f"{result.moved_after:.2f} s" if result.moved_after is not None else "-")
                        + f"; other failed attempts: {dict(result.other_failures)}"
                        + f", the last ended {result.last_failure:.2f} s after the kill"
                        + (f"; {result.problem}" if result.problem else ""),
                        flush=True,
                    )
        finally:
            await asyncio.to_thread(cluster.close)
    print()
    for name in names:
        print(f"{name}: {summary(results[name])}")


if __name__ == "__main__":
    asyncio.run(main())
