"""Chaos soak: 30 agents at work while the broker is SIGKILLed and restarted; then audit.

    .venv/bin/python benchmarks/chaos.py [--seconds 120] [--kills 5] [--agents 30] [--seed N]
        [--postgres [URL]] [--cuts 3] [--keep DIR]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite in a temporary data
directory) and provisions one lobby of N agents through the admin API. Each agent is a real
WebSocket client on /v1/stream speaking the bridge's push protocol (runtime and generation
headers, `received` and `host_written` for every notice, heartbeats whose answer means "all
you reported is recorded", `ready` with the bootstrap's nonce) and calls the HTTP API with its
runtime headers as a bridge does. The agents do mixed work: direct, room and broadcast sends,
scheduled sends (`deliver_at` a few seconds ahead), daily schedules, acknowledgments,
checkpoints (saved and read back), rests and resumes, and deliberate retries of sends whose
answer they know (including right after each kill). A send cut off by a kill has an unknown
outcome: the agent retries it with the same key until it is answered.

Meanwhile the broker is SIGKILLed at random moments (--kills, 5 by default) and restarted on
its port after a short random pause. With --postgres two broker processes share one
PostgreSQL database (created for the run, dropped after) and one Redis database; agents are
split between them and each kill takes down one of the two at random; and every session of
the database (the brokers' requests' and their locks') is terminated at random moments
(--cuts, 3 by default). Every answer must be 2xx/4xx or the retryable `503`, which the agents
retry under the same key as an unknown outcome; any other 5xx is a violation, and both are
counted in the report.

Afterwards the agents read and acknowledge their whole inbox, the brokers stop, and the store
itself (the SQLite file, or the PostgreSQL database) is audited against what the agents saw:

- every send answered `stored` is present exactly once, with its sender, key and content, and
  its deliveries are exactly the recipients its answer named; no message the agents did not
  send (or that a schedule did not fire) exists, and a refused send stored nothing;
- every delivery is `seen`, `pending` or `held` with a reason (none vanished), every
  acknowledgment the broker answered is `seen`, and every pending message was pushed;
- every retry with a known key returned the original message (`duplicate: true`);
- each agent's checkpoint revisions, in the order it observed them, never went backwards, and
  the stored revision is the last one it saw;
- every notice a bridge was pushed is recorded (agent, generation, kind, message ids), and
  every `host_written` the broker confirmed with a heartbeat answer is recorded on the notice
  and on its deliveries.

Prints the counts and each violation; exits 1 on any violation. `run_soak` is the reusable
core (tests/benchmarks/test_chaos.py runs a short soak in the suite).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from lobbies.wire.frames import (  # noqa: E402
    EVENT_VERSION,
    EVENT_VERSION_HEADER,
    GENERATION_HEADER,
    RUNTIME_HEADER,
)
from tests.server import Broker  # noqa: E402

LOBBY = "chaos"
ROOMS = ("alpha", "beta", "gamma")
MANAGERS = 4  # the first agents may broadcast, manage rooms and rest others
HTTP_TIMEOUT = 15.0
UNKNOWN_RETRY_SECONDS = 90.0  # how long a send with an unknown outcome is retried
SETTLE_SECONDS = 4.0
REDIS_CLAIM_KEY = "pocolobby-chaos:claim"
# Report lines every soak prints, each 0 when nothing happened.
HTTP_503 = "http 503 (retryable, retried)"
HTTP_5XX_NOT_503 = "http 5xx other than 503"
CUTS = "database connection cuts"

Frame = dict[str, Any]


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------- configuration and report


@dataclass
class SoakConfig:
    seconds: float = 120.0
    kills: int = 5
    agents: int = 30
    seed: int | None = None
    # A PostgreSQL server URL (postgres://user@host:port); None runs on embedded SQLite.
    postgres: str | None = None
    redis: str = "redis://127.0.0.1:6379"
    root: Path | None = None
    # On PostgreSQL: times every session of the brokers' database is terminated
    # (pg_terminate_backend: requests', locks', all), as a database restart or a DBA would.
    cuts: int = 3
    say: Callable[[str], None] = print
    # Called with the store's reader after the brokers stopped, before the audit (a test
    # changes the store behind the brokers' back to see the audit catch it).
    before_audit: Callable[[StoreReader], None] | None = None


@dataclass
class SoakReport:
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def violation(self, text: str) -> None:
        self.violations.append(text)

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = [f"  {name:<44} {value}" for name, value in sorted(self.counts.items())]
        lines.append(f"  {'violations':<44} {len(self.violations)}")
        lines.extend(f"  VIOLATION: {text}" for text in self.violations[:50])
        if len(self.violations) > 50:
            lines.append(f"  ... and {len(self.violations) - 50} more")
        return "\n".join(lines)


# ---------------------------------------------------------------- what the agents saw


@dataclass
class SendRecord:
    """One send request (a fixed body under a fixed key) and what became of it."""

    agent: str
    path: str
    body: Frame
    kind: str  # direct | room | broadcast | scheduled
    message_id: int | None = None
    recipients: set[str] | None = None
    refused: str | None = None
    unknown_outcome: bool = False  # a transport failure once left it unanswered

    @property
    def key(self) -> str:
        return str(self.body["client_request_id"])


@dataclass
class NoticeSeen:
    notice_id: str
    kind: str
    generation: int
    message_ids: list[int]


class Cluster:
    """One broker (SQLite) or two sharing PostgreSQL and Redis."""

    def __init__(self, brokers: list[Broker], admin_token: str) -> None:
        self.brokers = brokers
        self.admin_token = admin_token
        self.kills = 0
        self.epoch = 0  # bumped at each restart: agents retry their last send after it


@dataclass
class Shared:
    report: SoakReport
    cluster: Cluster
    rng: random.Random
    agents: dict[str, ChaosAgent] = field(default_factory=dict)
    rooms: dict[str, list[str]] = field(default_factory=dict)
    resting: dict[str, str] = field(default_factory=dict)  # rested agent -> who rested it
    stopping: bool = False


class ChaosAgent:
    def __init__(self, name: str, token: str, broker: Broker, shared: Shared, index: int):
        self.name = name
        self.token = token
        self.broker = broker
        self.shared = shared
        self.manager = index < MANAGERS
        self.rng = random.Random(shared.rng.random())
        self.runtime = str(uuid.uuid4())
        self.generation: int | None = None
        self.sends: list[SendRecord] = []
        self.notices: list[NoticeSeen] = []
        self.confirmed_written: set[str] = set()
        # Per heartbeat sent on the current socket, in order: the host_written facts before it.
        self.heartbeats_waiting: list[list[str]] = []
        self.heartbeats_answered = 0
        self.heartbeats_sent = 0
        self.send_lock = asyncio.Lock()
        self.acknowledged: set[int] = set()
        self.receipt_sequence = 0
        self.revisions: list[int] = []
        self.checkpoint_revision = 0
        self.nonce: str | None = None
        self.ready = False
        self.seen_epoch = 0
        self.schedule_id: int | None = None
        self.socket: ClientConnection | None = None
        self.http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, trust_env=False)
        self.counter = 0

    @property
    def report(self) -> SoakReport:
        return self.shared.report

    def count(self, name: str, by: int = 1) -> None:
        self.report.counts[name] += by

    # ------------------------------------------------------------ HTTP

    def _headers(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.generation is not None:
            headers[RUNTIME_HEADER] = self.runtime
            headers[GENERATION_HEADER] = str(self.generation)
        return headers

    async def call(
        self, method: str, path: str, body: Frame | None = None, params: Frame | None = None
    ) -> httpx.Response:
        """One request; transport errors propagate (the caller knows if it may retry)."""
        response = await self.http.request(
            method,
            self.broker.url + path,
            json=body,
            params=params,
            headers=self._headers(),
        )
        if response.status_code == 503:
            self.count(HTTP_503)  # retryable (store_unavailable): a cut connection, a lost lock
        elif response.status_code >= 500:
            self.count(HTTP_5XX_NOT_503)
            self.report.violation(
                f"{self.name}: {method} {path} answered {response.status_code}: "
                f"{response.text[:200]}"
            )
        self.count(f"http {response.status_code}")
        return response

    async def call_until_answered(
        self, method: str, path: str, body: Frame | None = None, params: Frame | None = None
    ) -> tuple[httpx.Response | None, bool]:
        """Retry through a broker outage; (response or None, whether an attempt was cut off
        after it may have reached the broker)."""
        deadline = time.monotonic() + UNKNOWN_RETRY_SECONDS
        cut_off = False
        while True:
            try:
                response = await self.call(method, path, body, params)
                if response.status_code != 503 or time.monotonic() > deadline:
                    return response, cut_off
                # Retryable; what a lost connection cut off may have been stored all the same.
                cut_off = True
            except httpx.ConnectError:
                self.count("http refused connection (broker down)")
            except httpx.TransportError:
                cut_off = True
                self.count("http cut off (unknown outcome)")
            if time.monotonic() > deadline:
                return None, cut_off
            await asyncio.sleep(0.2 + self.rng.random() * 0.5)

    # ------------------------------------------------------------ the stream

    async def stream(self) -> None:
        while not self.shared.stopping:
            headers = {
                "Authorization": f"Bearer {self.token}",
                EVENT_VERSION_HEADER: str(EVENT_VERSION),
                RUNTIME_HEADER: self.runtime,
            }
            if self.generation is not None:
                headers[GENERATION_HEADER] = str(self.generation)
            url = "ws" + self.broker.url.removeprefix("http") + "/v1/stream"
            try:
                async with connect(
                    url,
                    additional_headers=headers,
                    proxy=None,
                    compression=None,
                    open_timeout=10,
                    close_timeout=2,
                    max_size=None,
                ) as socket:
                    self.socket = socket
                    self.count("stream connections")
                    try:
                        await self._read(socket)
                    finally:
                        self.socket = None
                        self.heartbeats_waiting.clear()
                        self.heartbeats_sent = self.heartbeats_answered = 0
            except (OSError, InvalidHandshake, InvalidStatus, TimeoutError, ConnectionClosed):
                pass
            if not self.shared.stopping:
                await asyncio.sleep(0.2 + self.rng.random() * 0.6)

    async def _read(self, socket: ClientConnection) -> None:
        async for raw in socket:
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "welcome":
                if self.generation is not None and frame["generation"] != self.generation:
                    self.report.violation(
                        f"{self.name}: a reconnect with generation {self.generation} was "
                        f"welcomed as generation {frame['generation']}"
                    )
                self.generation = frame["generation"]
            elif kind == "notice":
                await self._on_notice(socket, frame)
            elif kind == "heartbeat":
                if self.heartbeats_waiting:
                    self.confirmed_written.update(self.heartbeats_waiting.pop(0))
                    self.heartbeats_answered += 1
            elif kind == "error":
                self.report.violation(f"{self.name}: the stream sent an error: {frame}")
                if "status" in frame:
                    self.shared.stopping = True  # a refusal: nothing this soak should cause
                    return

    async def _on_notice(self, socket: ClientConnection, frame: Frame) -> None:
        notice = NoticeSeen(
            str(frame["notice_id"]),
            str(frame["notice_kind"]),
            int(frame["generation"]),
            [int(i) for i in frame["message_ids"]],
        )
        self.notices.append(notice)
        self.count(f"notices pushed: {notice.kind}")
        if notice.kind == "bootstrap":
            body = json.loads(str(frame["content"]).split("\n", 1)[1])
            self.nonce = str(body["nonce"])
        frames = [{"type": "received", "notice_id": notice.notice_id}]
        written: list[str] = []
        # Most notices are confirmed written to the host; some only received (a host write
        # that failed): the broker must keep them apart.
        if self.rng.random() < 0.9:
            frames.append({"type": "host_written", "notice_id": notice.notice_id})
            written.append(notice.notice_id)
        await self._heartbeat(socket, frames, written)

    async def _heartbeat(
        self, socket: ClientConnection, frames: list[Frame], written: list[str]
    ) -> int:
        """Send `frames` then a heartbeat, in order with any other task's; its number."""
        async with self.send_lock:
            for frame in frames:
                await socket.send(json.dumps(frame))
            self.heartbeats_waiting.append(written)
            self.heartbeats_sent += 1
            await socket.send(json.dumps({"type": "heartbeat"}))
            return self.heartbeats_sent

    async def roundtrip(self) -> bool:
        """A heartbeat answered on the current socket (so every fact sent is recorded)."""
        socket = self.socket
        if socket is None:
            return False
        try:
            number = await self._heartbeat(socket, [], [])
        except ConnectionClosed:
            return False
        for _ in range(200):
            if self.heartbeats_answered >= number or self.socket is not socket:
                break
            await asyncio.sleep(0.05)
        return self.socket is socket and self.heartbeats_answered >= number

    # ------------------------------------------------------------ work

    def key(self, what: str) -> str:
        self.counter += 1
        return f"{self.name}-{what}-{self.counter}"

    def content(self, what: str) -> str:
        return f"{what} from {self.name} #{self.counter}: {secrets.token_hex(6)} ünïcødé ✓"

    def others(self) -> list[str]:
        return [name for name in self.shared.agents if name != self.name]

    async def work(self, until: float) -> None:
        while time.monotonic() < until and not self.shared.stopping:
            await asyncio.sleep(0.25 + self.rng.random() * 0.75)
            if self.generation is None:
                continue
            if self.shared.cluster.epoch != self.seen_epoch:
                self.seen_epoch = self.shared.cluster.epoch
                await self.retry_known(after_kill=True)
                continue
            if self.nonce is not None and not self.ready:
                await self.call_ready()
                continue
            await self.one_step()

    async def one_step(self) -> None:
        roll = self.rng.random()
        if roll < 0.30:
            await self.send_direct()
        elif roll < 0.40:
            await self.send_room()
        elif roll < 0.43 and self.manager:
            await self.send_broadcast()
        elif roll < 0.50:
            await self.send_direct(scheduled=True)
        elif roll < 0.70:
            await self.acknowledge()
        elif roll < 0.80:
            await self.checkpoint()
        elif roll < 0.88:
            await self.retry_known(after_kill=False)
        elif roll < 0.93 and self.manager:
            await self.rest()
        elif roll < 0.95 and self.manager and self.schedule_id is None:
            await self.daily_schedule()
        else:
            await self.read_checkpoint()

    async def call_ready(self) -> None:
        try:
            response = await self.call("POST", "/v1/me/ready", {"nonce": self.nonce})
        except httpx.TransportError:
            return
        if response.status_code == 200:
            self.ready = True
            self.count("ready")

    async def send(self, record: SendRecord) -> None:
        self.sends.append(record)
        self.count(f"sends: {record.kind}")
        response, cut_off = await self.call_until_answered("POST", record.path, record.body)
        record.unknown_outcome = cut_off
        if cut_off:
            self.count("sends retried after an unknown outcome")
        if response is None:
            self.count("sends never answered")
            return
        if response.status_code != 200:
            record.refused = response.json().get("error", {}).get("code", "?")
            self.count(f"sends refused: {record.refused}")
            return
        answer = response.json()
        if answer.get("status") != "stored":
            self.report.violation(f"{self.name}: a send answered {answer}")
            return
        record.message_id = int(answer["message_id"])
        record.recipients = {r["agent_id"] for r in answer["recipients"]}
        self.count("sends stored")
        if cut_off:
            self.count(
                "unknown outcomes that had been stored"
                if answer["duplicate"]
                else "unknown outcomes that had not been stored"
            )
        elif answer["duplicate"]:
            self.report.violation(f"{self.name}: a first send {record.key} came back duplicate")

    async def send_direct(self, scheduled: bool = False) -> None:
        body: Frame = {
            "to": self.rng.choice(self.others()),
            "content": self.content("direct"),
            "client_request_id": self.key("direct"),
            "priority": self.rng.choice(["info", "info", "important"]),
        }
        if scheduled:
            body["deliver_at"] = iso(utc_now() + timedelta(seconds=self.rng.uniform(2, 8)))
        await self.send(
            SendRecord(self.name, "/v1/messages", body, "scheduled" if scheduled else "direct")
        )

    async def send_room(self) -> None:
        mine = [room for room, members in self.shared.rooms.items() if self.name in members]
        if not mine:
            await self.send_direct()
            return
        room = self.rng.choice(mine)
        body: Frame = {
            "room_id": room,
            "content": self.content("room"),
            "client_request_id": self.key("room"),
        }
        members = [m for m in self.shared.rooms[room] if m != self.name]
        if self.rng.random() < 0.3:
            body["addressed_to"] = self.rng.sample(members, min(2, len(members)))
        await self.send(SendRecord(self.name, "/v1/tools/send_room_message", body, "room"))

    async def send_broadcast(self) -> None:
        body: Frame = {"content": self.content("broadcast"), "client_request_id": self.key("bc")}
        await self.send(SendRecord(self.name, "/v1/tools/broadcast", body, "broadcast"))

    async def retry_known(self, *, after_kill: bool) -> None:
        answered = [r for r in self.sends if r.message_id is not None]
        if not answered:
            return
        record = answered[-1] if after_kill else self.rng.choice(answered)
        response, _ = await self.call_until_answered("POST", record.path, record.body)
        self.count("retries with a known key" + (" (after a kill)" if after_kill else ""))
        if response is None:
            self.count("retries never answered")
            return
        answer = response.json() if response.status_code == 200 else {}
        if answer.get("message_id") != record.message_id or answer.get("duplicate") is not True:
            self.report.violation(
                f"{self.name}: retry of {record.key} (message {record.message_id}) answered "
                f"{response.status_code} {response.text[:200]}"
            )

    async def acknowledge(self) -> None:
        try:
            response = await self.call("GET", "/v1/messages", params={"view": "inbox", "limit": 50})
        except httpx.TransportError:
            return
        if response.status_code != 200:
            return
        ids = [m["message_id"] for m in response.json()["messages"]]
        if not ids:
            return
        chosen = ids if self.rng.random() < 0.7 else self.rng.sample(ids, (len(ids) + 1) // 2)
        await self.acknowledge_ids(chosen)

    async def acknowledge_ids(self, ids: list[int]) -> None:
        try:
            response = await self.call("POST", "/v1/messages/acknowledge", {"message_ids": ids})
        except httpx.TransportError:
            return
        if response.status_code == 200:
            answer = response.json()
            self.acknowledged.update(answer["acknowledged"])
            self.receipt_sequence = max(self.receipt_sequence, answer["receipt_sequence"])
            self.count("acknowledgments answered", len(answer["acknowledged"]))

    def observe_revision(self, revision: int, how: str) -> None:
        if self.revisions and revision < self.revisions[-1]:
            self.report.violation(
                f"{self.name}: checkpoint revision went back from {self.revisions[-1]} to "
                f"{revision} ({how})"
            )
        self.revisions.append(revision)
        self.checkpoint_revision = revision

    async def checkpoint(self) -> None:
        body = {
            "expected_revision": self.checkpoint_revision,
            "checkpoint": {"note": self.content("checkpoint"), "acked": len(self.acknowledged)},
            "covers_receipts_through": self.receipt_sequence,
        }
        try:
            response = await self.call("POST", "/v1/tools/save_checkpoint", body)
        except httpx.TransportError:
            self.count("checkpoint saves cut off")
            return
        answer = response.json()
        if response.status_code == 200:
            self.count("checkpoint saves")
            self.observe_revision(int(answer["revision"]), "saved")
        elif answer.get("error", {}).get("code") == "checkpoint_conflict":
            # A save cut off by a kill may have been stored: adopt the broker's revision.
            self.count("checkpoint conflicts (a cut-off save had been stored)")
            self.observe_revision(int(answer["error"]["revision"]), "conflict")
        else:
            self.count(f"checkpoint refused: {answer.get('error', {}).get('code')}")

    async def read_checkpoint(self) -> None:
        try:
            response = await self.call("POST", "/v1/tools/read_checkpoint", {})
        except httpx.TransportError:
            return
        if response.status_code == 200:
            checkpoint = response.json()["checkpoint"]
            self.count("checkpoint reads")
            self.observe_revision(0 if checkpoint is None else int(checkpoint["revision"]), "read")

    async def rest(self) -> None:
        resting = self.shared.resting
        mine = [name for name, by in resting.items() if by == self.name]
        if mine:
            body: Frame = {"agent_ids": mine, "rest": False}
        else:
            free = [n for n in self.others() if n not in resting]
            body = {"agent_ids": [self.rng.choice(free)], "rest": True}
        if body["rest"] and self.rng.random() < 0.3:
            body["at"] = iso(utc_now() + timedelta(seconds=self.rng.uniform(1, 4)))
        try:
            response = await self.call("POST", "/v1/tools/rest_agents", body)
        except httpx.TransportError:
            return
        if response.status_code != 200:
            self.count(f"rests refused: {response.json().get('error', {}).get('code')}")
            return
        for name in body["agent_ids"]:
            if body["rest"]:
                resting[name] = self.name
            else:
                resting.pop(name, None)
        self.count("rests" if body["rest"] else "resumes")

    async def daily_schedule(self) -> None:
        start = utc_now().replace(second=0, microsecond=0) + timedelta(minutes=1)
        times = sorted({(start + timedelta(minutes=i)).strftime("%H:%M") for i in range(24)})
        body: Frame = {
            "client_request_id": self.key("daily"),
            "to": self.rng.choice(self.others()),
            "content": self.content("daily"),
            "time_zone": "UTC",
            "times": times,
        }
        for attempt in ("first", "retry"):
            response, _ = await self.call_until_answered("POST", "/v1/tools/schedule_message", body)
            if response is None or response.status_code != 200:
                self.count("daily schedules refused")
                return
            answer = response.json()
            if attempt == "first":
                self.schedule_id = int(answer["schedule_id"])
                self.count("daily schedules")
            elif answer["schedule_id"] != self.schedule_id or answer["duplicate"] is not True:
                self.report.violation(f"{self.name}: schedule retry answered {answer}")
            else:
                self.count("retries with a known key (schedule)")

    async def drain(self) -> list[int]:
        """Read the whole inbox and acknowledge it; the ids read."""
        read: list[int] = []
        for _ in range(100):
            response, _ = await self.call_until_answered(
                "GET", "/v1/messages", params={"view": "inbox", "limit": 200}
            )
            if response is None or response.status_code != 200:
                self.report.violation(f"{self.name}: could not read its inbox at the end")
                return read
            ids = [m["message_id"] for m in response.json()["messages"]]
            if not ids:
                return read
            read.extend(ids)
            await self.acknowledge_ids(ids)
        self.report.violation(f"{self.name}: its inbox did not empty")
        return read


# ---------------------------------------------------------------- the brokers


def broker_env() -> dict[str, str]:
    # Bounds that refuse or hold work by design, lifted: the soak is about what a kill may
    # lose. The per-minute notice cap defers a busy agent's pushes up to a minute, and check
    # 3 reads each inbox seconds after the work stops (a 30-minute run at ~54 notices a
    # minute an agent met it: two agents' pushes were due 0.05-2.5 s after the read).
    return {
        "POCOLOBBY_SENDS_PER_MINUTE": "100000",
        "POCOLOBBY_QUEUED_MESSAGES": "100000",
        "POCOLOBBY_NOTICES_PER_MINUTE": "100000",
        "POCOLOBBY_LOG_LEVEL": "WARNING",
    }


def claim_redis_db(url: str) -> tuple[int, Callable[[], None]]:
    """An empty Redis database number, claimed with a marker key; and how to release it."""
    import redis  # local: only the --postgres mode needs Redis

    claim = secrets.token_hex(8)
    for number in range(15, 0, -1):
        client = redis.Redis.from_url(url, db=number)
        try:
            if client.set(REDIS_CLAIM_KEY, claim, nx=True, ex=7200):
                if client.dbsize() == 1:
                    return number, lambda c=client: (c.flushdb(), c.close())  # type: ignore[misc]
                client.delete(REDIS_CLAIM_KEY)
        except redis.ResponseError:
            pass
        client.close()
    raise SystemExit("no empty Redis database number to claim")


def pg_admin(server: str, dbname: str = "postgres") -> Any:
    import psycopg  # local: only the --postgres mode needs it

    return psycopg.connect(f"{server}/{dbname}", autocommit=True, connect_timeout=5)


def pg_server(url: str) -> str:
    """postgres://user@host:port[/db] -> postgres://user@host:port"""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


async def provision(shared: Shared, names: list[str]) -> dict[str, str]:
    cluster = shared.cluster
    url = cluster.brokers[0].url
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    tokens: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        response = await client.post("/v1/admin/lobbies", json={"name": LOBBY})
        assert response.status_code == 201, response.text
        for index, name in enumerate(names):
            answer = await client.post(f"/v1/admin/lobbies/{LOBBY}/agents", json={"agent_id": name})
            assert answer.status_code == 201, answer.text
            tokens[name] = answer.json()["token"]
            if index < MANAGERS:
                grant = await client.post(
                    f"/v1/admin/lobbies/{LOBBY}/agents/{name}/permissions",
                    json={"broadcast": True, "manage_rooms": True},
                )
                assert grant.status_code == 200, grant.text
    return tokens


async def create_rooms(shared: Shared, manager: ChaosAgent) -> None:
    names = list(shared.agents)
    for room in ROOMS:
        members = sorted({manager.name, *shared.rng.sample(names, min(10, len(names)))})
        response = await manager.call(
            "POST", "/v1/tools/create_room", {"room_id": room, "members": members}
        )
        assert response.status_code == 200, response.text
        shared.rooms[room] = members


async def killer(shared: Shared, seconds: float, kills: int, say: Callable[[str], None]) -> None:
    """SIGKILL a broker at random moments, restart it after a short random pause."""
    rng = shared.rng
    cluster = shared.cluster
    moments = sorted(rng.uniform(0.08, 0.85) * seconds for _ in range(kills))
    began = time.monotonic()
    for moment in moments:
        await asyncio.sleep(max(0.0, began + moment - time.monotonic()))
        broker = rng.choice(cluster.brokers)
        await asyncio.to_thread(broker.kill9)
        cluster.kills += 1
        down = rng.uniform(0.1, 1.5)
        say(
            f"  t={time.monotonic() - began:6.1f}s  kill #{cluster.kills} ({broker.url}), "
            f"down {down:.1f}s"
        )
        await asyncio.sleep(down)
        started = time.monotonic()
        await asyncio.to_thread(broker.start, 60)
        shared.report.counts["broker restarts"] += 1
        shared.report.counts["restart seconds (total, x100)"] += int(
            (time.monotonic() - started) * 100
        )
        cluster.epoch += 1


async def cutter(
    shared: Shared,
    server: str,
    database: str,
    seconds: float,
    cuts: int,
    say: Callable[[str], None],
) -> None:
    """Terminate every session of the brokers' database at random moments: each broker must
    answer 200 or 503 through it (never another 5xx) and lose and duplicate nothing."""
    rng = random.Random(shared.rng.random())
    moments = sorted(rng.uniform(0.1, 0.9) * seconds for _ in range(cuts))
    began = time.monotonic()
    for moment in moments:
        await asyncio.sleep(max(0.0, began + moment - time.monotonic()))
        cut = await asyncio.to_thread(cut_sessions, server, database)
        shared.report.counts[CUTS] += 1
        shared.report.counts["database sessions cut"] += cut
        say(f"  t={time.monotonic() - began:6.1f}s  cut {cut} database sessions")


def cut_sessions(server: str, database: str) -> int:
    with pg_admin(server) as admin:
        return len(
            admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [database],
            ).fetchall()
        )


# ---------------------------------------------------------------- the audit


class StoreReader:
    """Raw reads of the broker's tables (after the brokers stopped)."""

    def __init__(self, sqlite_path: Path | None, pg_url: str | None) -> None:
        self.sqlite_path = sqlite_path
        self.pg_url = pg_url

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.sqlite_path is not None:
            connection = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True)
            try:
                return connection.execute(sql).fetchall()
            finally:
                connection.close()
        import psycopg  # local: only the --postgres mode needs it

        assert self.pg_url is not None
        with psycopg.connect(self.pg_url) as connection:
            return list(connection.execute(sql).fetchall())  # type: ignore[arg-type]


def audit(shared: Shared, reader: StoreReader, pending_before_drain: dict[str, set[int]]) -> None:
    report = shared.report
    agents = shared.agents
    lobby = f"(SELECT id FROM lobbies_lobby WHERE name = '{LOBBY}')"
    messages = {
        int(row[0]): row
        for row in reader.rows(
            "SELECT id, sender_name, client_request_id, content, schedule_id "
            f"FROM lobbies_message WHERE lobby_id = {lobby}"
        )
    }
    deliveries: dict[int, dict[str, tuple[Any, ...]]] = {}
    for row in reader.rows(
        "SELECT d.message_id, a.agent_id, d.state, d.held_reason, d.notification_attempted_at, "
        "d.notified_generation FROM lobbies_delivery d JOIN lobbies_agent a ON a.id = "
        f"d.recipient_id WHERE a.lobby_id = {lobby}"
    ):
        deliveries.setdefault(int(row[0]), {})[str(row[1])] = row
    notices = {
        str(row[0]).replace("-", ""): row
        for row in reader.rows(
            "SELECT n.id, a.agent_id, n.generation, n.kind, n.message_ids, n.host_written_at "
            f"FROM lobbies_notice n JOIN lobbies_agent a ON a.id = n.agent_id "
            f"WHERE a.lobby_id = {lobby}"
        )
    }
    checkpoints = {
        str(row[0]): int(row[1])
        for row in reader.rows(
            "SELECT a.agent_id, c.revision FROM lobbies_checkpoint c JOIN lobbies_agent a "
            f"ON a.id = c.agent_id WHERE a.lobby_id = {lobby}"
        )
    }
    counts = report.counts
    counts["store: messages"] = len(messages)
    counts["store: deliveries"] = sum(len(d) for d in deliveries.values())
    counts["store: notices"] = len(notices)

    # 1. Every stored send exactly once; refused ones not at all; no phantoms.
    by_key: Counter[tuple[str, str]] = Counter((str(m[1]), str(m[2])) for m in messages.values())
    sent_keys = set()
    for agent in agents.values():
        for record in agent.sends:
            sent_keys.add((record.agent, record.key))
            stored = by_key[(record.agent, record.key)]
            if record.message_id is not None:
                row = messages.get(record.message_id)
                if row is None:
                    report.violation(f"lost: {record.key} answered stored as {record.message_id}")
                    continue
                if (row[1], row[2], row[3]) != (record.agent, record.key, record.body["content"]):
                    report.violation(f"message {record.message_id} is not {record.key}: {row[:3]}")
                if stored != 1:
                    report.violation(f"{record.key} is stored {stored} times")
                got = set(deliveries.get(record.message_id, {}))
                if got != record.recipients:
                    report.violation(
                        f"message {record.message_id} ({record.kind}): deliveries to "
                        f"{sorted(got)}, its answer named {sorted(record.recipients or [])}"
                    )
            elif record.refused is not None and stored:
                report.violation(f"{record.key} was refused ({record.refused}) yet stored")
            elif stored > 1:
                report.violation(f"{record.key} (never answered) is stored {stored} times")
    for (sender, key), number in by_key.items():
        if (sender, key) not in sent_keys and not any(
            m[4] is not None for m in messages.values() if (m[1], m[2]) == (sender, key)
        ):
            report.violation(f"a message nobody sent: {sender} {key} x{number}")
    fired = [m for m in messages.values() if m[4] is not None]
    counts["store: daily schedule occurrences"] = len(fired)
    for message in fired:
        if not deliveries.get(int(message[0])):
            report.violation(f"schedule occurrence {message[0]} has no delivery")

    # 2. Deliveries: seen, pending or held with a reason; acknowledged ones seen; none pending.
    states: Counter[str] = Counter()
    for message_id, per_agent in deliveries.items():
        for name, row in per_agent.items():
            state, reason = str(row[2]), row[3]
            states[f"{state}:{reason}" if reason else state] += 1
            if state not in ("seen", "pending", "held") or (state == "held") != bool(reason):
                report.violation(f"delivery of {message_id} to {name}: {state} {reason}")
            if state == "pending":
                origin = messages.get(message_id)
                report.violation(
                    f"delivery of {message_id} to {name} still pending after drain "
                    f"(message {origin[1:3] if origin else 'gone'}, schedule "
                    f"{origin[4] if origin else None})"
                )
    for state, number in states.items():
        counts[f"store: deliveries {state}"] = number
    for agent in agents.values():
        for message_id in agent.acknowledged:
            row = deliveries.get(message_id, {}).get(agent.name)
            if row is None or row[2] != "seen":
                report.violation(
                    f"{agent.name} acknowledged {message_id}, the store has "
                    f"{None if row is None else row[2]}"
                )

    # 3. Every message still pending once the agents were connected and resumed was pushed.
    for name, pending in pending_before_drain.items():
        pushed = {i for n in agents[name].notices for i in n.message_ids}
        for message_id in sorted(pending - pushed):
            report.violation(f"{name}: message {message_id} was pending but never pushed")
        counts["pending at the end, checked pushed"] += len(pending)

    # 4. Checkpoints.
    for agent in agents.values():
        stored_revision = checkpoints.get(agent.name, 0)
        last = agent.revisions[-1] if agent.revisions else 0
        if stored_revision < last:
            report.violation(
                f"{agent.name}: checkpoint revision {stored_revision} stored, {last} was seen"
            )
        counts["checkpoint revisions observed"] += len(agent.revisions)

    # 5. Notices: each pushed one recorded; each confirmed host write recorded.
    for agent in agents.values():
        for notice in agent.notices:
            row = notices.get(notice.notice_id.replace("-", ""))
            ids = [] if row is None else json.loads(row[4]) if isinstance(row[4], str) else row[4]
            if row is None or (str(row[1]), int(row[2]), str(row[3]), ids) != (
                agent.name,
                notice.generation,
                notice.kind,
                notice.message_ids,
            ):
                report.violation(f"{agent.name}: notice {notice.notice_id} recorded as {row}")
                continue
            if notice.notice_id in agent.confirmed_written:
                counts["notices confirmed host_written"] += 1
                if row[5] is None:
                    report.violation(
                        f"{agent.name}: host_written of notice {notice.notice_id} confirmed, "
                        "not recorded"
                    )
                if notice.kind in ("messages", "backlog", "bootstrap", "hint"):
                    for message_id in notice.message_ids:
                        delivery = deliveries.get(message_id, {}).get(agent.name)
                        if delivery is not None and delivery[4] is None:
                            report.violation(
                                f"{agent.name}: message {message_id} confirmed written "
                                f"(notice {notice.notice_id}) without notification_attempted_at"
                            )


# ---------------------------------------------------------------- the run


async def _soak(config: SoakConfig, root: Path, report: SoakReport) -> None:
    say = config.say
    rng = random.Random(config.seed)
    cleanups: list[Callable[[], None]] = []
    brokers: list[Broker]
    pg_url: str | None = None
    try:
        if config.postgres:
            server = pg_server(config.postgres)
            database = f"pocolobby_chaos_{uuid.uuid4().hex[:10]}"
            with pg_admin(server) as admin:
                admin.execute(f'CREATE DATABASE "{database}"')

            def drop() -> None:
                with pg_admin(server) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                        [database],
                    )
                    admin.execute(f'DROP DATABASE IF EXISTS "{database}"')

            cleanups.append(drop)
            number, release = claim_redis_db(config.redis)
            cleanups.append(release)
            pg_url = f"{server}/{database}"
            token = f"pla_{secrets.token_urlsafe(24)}"
            env = {
                **broker_env(),
                "DATABASE_URL": pg_url,
                "REDIS_URL": f"{config.redis.rstrip('/')}/{number}",
                "POCOLOBBY_ADMIN_TOKEN": token,
            }
            brokers = [
                Broker(root / f"broker-{key}", env=env, log_path=root / f"broker-{key}.log")
                for key in ("a", "b")
            ]
        else:
            brokers = [Broker(root / "broker", env=broker_env(), log_path=root / "broker.log")]
        for broker in brokers:
            cleanups.insert(0, broker.stop)
            await asyncio.to_thread(broker.start, 60)
        if not config.postgres:
            token = brokers[0].admin_token
        cluster = Cluster(brokers, token)
        shared = Shared(report, cluster, rng)
        names = [f"agent-{i:02d}" for i in range(config.agents)]
        tokens = await provision(shared, names)
        for index, name in enumerate(names):
            broker = brokers[index % len(brokers)]
            shared.agents[name] = ChaosAgent(name, tokens[name], broker, shared, index)
        agents = list(shared.agents.values())
        streams = [asyncio.ensure_future(agent.stream()) for agent in agents]
        deadline = time.monotonic() + 30
        while any(a.generation is None for a in agents) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await create_rooms(shared, agents[0])
        say(
            f"soak: {len(agents)} agents on {len(brokers)} broker(s) "
            f"({'PostgreSQL + Redis' if config.postgres else 'SQLite'}), {config.seconds:.0f}s, "
            f"{config.kills} kills"
        )
        until = time.monotonic() + config.seconds
        began = time.monotonic()
        for line in (HTTP_503, HTTP_5XX_NOT_503, *([CUTS] if config.postgres else [])):
            report.counts[line] += 0  # printed even when nothing happened
        await asyncio.gather(
            killer(shared, config.seconds, config.kills, say),
            *(
                [cutter(shared, server, database, config.seconds, config.cuts, say)]
                if config.postgres
                else []
            ),
            *(agent.work(until) for agent in agents),
        )
        report.counts["seconds of work"] = int(time.monotonic() - began)
        report.counts["kills"] = cluster.kills

        # Settle: every broker up, timed rests applied, then every agent resumed and
        # connected, and every scheduled message due (deliver_at is at most 8 s ahead).
        for broker in brokers:
            if not broker.running:
                await asyncio.to_thread(broker.start, 60)
        for agent in agents:  # a daily schedule would fire on into the audit
            if agent.schedule_id is not None:
                response, _ = await agent.call_until_answered(
                    "POST", "/v1/tools/cancel_scheduled", {"schedule_id": agent.schedule_id}
                )
                if response is None or response.status_code != 200:
                    report.violation(f"{agent.name}: could not cancel its daily schedule")
        await asyncio.sleep(10)
        admin = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=brokers[0].url, headers=admin, timeout=30) as c:
            for name in names:
                answer = await c.post(f"/v1/admin/lobbies/{LOBBY}/agents/{name}/resume")
                if answer.status_code != 200:
                    report.violation(f"resume {name}: {answer.status_code} {answer.text[:200]}")
        await asyncio.sleep(SETTLE_SECONDS)
        for agent in agents:
            if agent.nonce is not None and not agent.ready:
                await agent.call_ready()
        for agent in agents:
            if not await agent.roundtrip():
                report.violation(f"{agent.name}: not connected at the end")
        pending: dict[str, set[int]] = {}
        for agent in agents:
            response, _ = await agent.call_until_answered(
                "GET", "/v1/messages", params={"view": "inbox", "limit": 200}
            )
            assert response is not None
            pending[agent.name] = {m["message_id"] for m in response.json()["messages"]}
            pending[agent.name] |= set(await agent.drain())
        for agent in agents:
            await agent.roundtrip()
        shared.stopping = True
        for agent in agents:
            if agent.socket is not None:
                await agent.socket.close()
        for task in streams:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for agent in agents:
            await agent.http.aclose()
        for broker in brokers:
            await asyncio.to_thread(broker.stop)
        reader = StoreReader(None if pg_url else brokers[0].data_dir / "pocolobby.sqlite3", pg_url)
        if config.before_audit is not None:
            config.before_audit(reader)
        await asyncio.to_thread(audit, shared, reader, pending)
    finally:
        for cleanup in cleanups:
            with contextlib.suppress(Exception):
                cleanup()


def run_soak(config: SoakConfig) -> SoakReport:
    """Run one soak and audit it; the report holds the counts and any violation."""
    report = SoakReport()
    if config.root is not None:
        asyncio.run(_soak(config, config.root, report))
    else:
        with tempfile.TemporaryDirectory(prefix="pocolobby-chaos-") as tmp:
            asyncio.run(_soak(config, Path(tmp), report))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--agents", type=int, default=30)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--postgres",
        nargs="?",
        const=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432",
        default=None,
        help="two brokers on PostgreSQL (this server; a database is created) and Redis",
    )
    parser.add_argument(
        "--cuts", type=int, default=3, help="PostgreSQL: times every database session is cut"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--keep", type=Path, default=None, help="keep logs and data here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report = run_soak(
        SoakConfig(
            seconds=args.seconds,
            kills=args.kills,
            agents=args.agents,
            seed=seed,
            postgres=args.postgres,
            redis=args.redis,
            root=args.keep,
            cuts=args.cuts,
        )
    )
    print(f"chaos soak (seed {seed}) took {time.monotonic() - started:.0f}s:")
    print(report.render())
    print("OK: no violation" if report.ok else f"FAILED: {len(report.violations)} violation(s)")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
