"""Push latency to connected bridges, and the broker's memory with 1,000 idle sockets.

    .venv/bin/python benchmarks/push_latency.py [--messages 1000] [--recipients 100]
        [--senders 4] [--rate 0] [--connections 1000]

1. Latency. Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary
   data directory, send-rate and queue limits raised through the environment), creates a lobby
   with N recipient agents and a few sender agents through the admin HTTP API (the CLI would
   cost a subprocess per agent), and connects one WebSocket per recipient to /v1/stream, each
   answering every notice with `received` and `host_written` as a bridge does. Then, once for
   `info` and once for `important` priority, sends M messages round-robin over the recipients
   from concurrent sender tasks (keep-alive httpx clients) and measures, per message, the time
   from the arrival of its `200 stored` answer to the arrival of the push frame naming its
   message id (one clock: time.perf_counter in this process). Info pushes wait for the batching
   delay (POCOLOBBY_PUSH_BATCH_MS, 20 ms by default); important ones skip it.
   By default each sender sends its next message when the last one was answered (closed
   loop: the offered load is whatever the send path sustains); --rate R paces all senders
   together at R messages per second instead. The target is p99 under 50 ms.
2. Memory. A fresh broker with 1,000 provisioned agents: its resident memory (VmRSS of the
   broker process) before any socket, then with 1,000 idle bridge sockets connected and
   bootstrapped (a handshake the broker drops is retried and counted). The target is under
   300 MB with the 1,000 sockets.

The sockets, the senders and the clock share one asyncio loop in this process, and this process
shares the machine with the broker: the figures include the client's own scheduling delay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from lobbies.wire.frames import EVENT_VERSION, EVENT_VERSION_HEADER, RUNTIME_HEADER  # noqa: E402
from tests.server import Broker  # noqa: E402

TARGET_P99_MS = 50.0
TARGET_RSS_MB = 300.0
LOBBY = "bench"
HANDSHAKE_ATTEMPTS = 5
CONTENT = "Review the auth change in api/session.py before the release branch is cut. " * 3


# ---------------------------------------------------------------- broker side


def broker_env(messages: int) -> dict[str, str]:
    generous = str(100 * messages + 100_000)
    return {
        "POCOLOBBY_SENDS_PER_MINUTE": generous,
        "POCOLOBBY_QUEUED_MESSAGES": generous,
        "POCOLOBBY_NOTICES_PER_MINUTE": generous,
        "POCOLOBBY_LOG_LEVEL": "WARNING",
    }


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB, from /proc/<pid>/status."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024  # kB -> MB
    return values["VmRSS"], values["VmHWM"]


def start_broker(root: Path, name: str, env: dict[str, str], attempts: int = 3) -> Broker:
    """Start a broker and make sure the process answering on its port is this one.

    `free_port` only proposes a port: another process of the machine (a test suite's broker)
    may take it before ours binds, and would then answer the readiness probe in its place.
    Only our own broker accepts our admin token.
    """
    for attempt in range(attempts):
        broker = Broker(root / f"{name}-data-{attempt}", env=env, log_path=root / f"{name}.log")
        broker.start()
        deadline = time.monotonic() + 30
        while not (broker.data_dir / "admin-token").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(FileNotFoundError, httpx.HTTPError):
            headers = {"Authorization": f"Bearer {broker.admin_token}"}
            if httpx.get(f"{broker.url}/v1/admin/status", headers=headers).status_code == 200:
                return broker
        broker.stop()
        print(f"{name}: port {broker.port} answered for another process; retrying", flush=True)
    raise SystemExit(f"could not start a broker of our own for the {name} phase")


async def provision(
    broker: Broker, lobby: str, names: Sequence[str], concurrency: int = 8
) -> dict[str, str]:
    """Create `lobby` and its agents through the admin API; return {agent name: token}."""
    headers = {"Authorization": f"Bearer {broker.admin_token}"}
    tokens: dict[str, str] = {}
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=broker.url, headers=headers, timeout=60) as client:
        response = await client.post("/v1/admin/lobbies", json={"name": lobby})
        if response.status_code != 201:
            raise SystemExit(f"lobby create: {response.status_code} {response.text[:300]}")

        async def add(name: str) -> None:
            async with gate:
                answer = await client.post(
                    f"/v1/admin/lobbies/{lobby}/agents", json={"agent_id": name}
                )
            if answer.status_code != 201:
                raise SystemExit(f"agent add {name}: {answer.status_code} {answer.text[:300]}")
            tokens[name] = answer.json()["token"]

        await asyncio.gather(*(add(name) for name in names))
    return tokens


# ---------------------------------------------------------------- bridge side


@dataclass
class Arrivals:
    """When each message id was first seen in a pushed `messages` notice."""

    at: dict[int, float] = field(default_factory=dict)
    notices: int = 0
    errors: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Bridge:
    name: str
    socket: ClientConnection
    reader: asyncio.Task[None] | None = None


def stream_uri(broker: Broker) -> str:
    return broker.url.replace("http://", "ws://", 1) + "/v1/stream"


async def acknowledge(socket: ClientConnection, notice: dict[str, Any]) -> None:
    """What a bridge answers to every notice: it got the frame, and wrote it to its host."""
    for kind in ("received", "host_written"):
        await socket.send(json.dumps({"type": kind, "notice_id": notice["notice_id"]}))


@dataclass
class Connects:
    """How the handshakes went: seconds per successful upgrade, and how many were retried."""

    handshakes: list[float] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)


async def open_bridge(uri: str, name: str, token: str, connects: Connects) -> Bridge:
    """Connect as a newly started bridge process; read the welcome and the bootstrap notice.

    A handshake the broker drops (a server under a burst of upgrades may close one it did not
    answer in time) is retried like a bridge would: same runtime id, no generation.
    """
    headers = {
        "Authorization": f"Bearer {token}",
        EVENT_VERSION_HEADER: str(EVENT_VERSION),
        RUNTIME_HEADER: str(uuid.uuid4()),
    }
    for attempt in range(1, HANDSHAKE_ATTEMPTS + 1):
        began = time.perf_counter()
        try:
            socket = await connect(uri, additional_headers=headers, max_size=None, open_timeout=60)
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            if attempt == HANDSHAKE_ATTEMPTS:
                raise
            connects.retried.append(f"{name}: {exc!r}"[:200])
            await asyncio.sleep(0.5 * attempt)
            continue
        connects.handshakes.append(time.perf_counter() - began)
        break
    welcome = json.loads(await asyncio.wait_for(socket.recv(), 60))
    if welcome.get("type") != "welcome" or welcome.get("bootstrap") is not True:
        raise SystemExit(f"{name}: expected a welcome that bootstraps, got {welcome}")
    notice = json.loads(await asyncio.wait_for(socket.recv(), 60))
    if notice.get("notice_kind") != "bootstrap":
        raise SystemExit(f"{name}: expected the bootstrap notice, got {notice}")
    await acknowledge(socket, notice)
    return Bridge(name, socket)


async def read_pushes(bridge: Bridge, arrivals: Arrivals) -> None:
    """Stamp each pushed message id on arrival, then answer the notice like a bridge."""
    with contextlib.suppress(ConnectionClosed):
        async for raw in bridge.socket:
            now = time.perf_counter()
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "notice":
                if frame.get("notice_kind") == "messages":
                    arrivals.notices += 1
                    for message_id in frame["message_ids"]:
                        arrivals.at.setdefault(message_id, now)
                    arrivals.changed.set()
                await acknowledge(bridge.socket, frame)
            elif kind == "error":
                arrivals.errors.append(f"{bridge.name}: {frame}")


async def open_bridges(
    broker: Broker, tokens: dict[str, str], concurrency: int, connects: Connects
) -> list[Bridge]:
    uri = stream_uri(broker)
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> Bridge:
        async with gate:
            return await open_bridge(uri, name, tokens[name], connects)

    return list(await asyncio.gather(*(one(name) for name in tokens)))


async def close_bridges(bridges: list[Bridge]) -> None:
    for bridge in bridges:
        if bridge.reader is not None:
            bridge.reader.cancel()
    await asyncio.gather(*(b.socket.close() for b in bridges), return_exceptions=True)


# ---------------------------------------------------------------- senders


@dataclass
class Sent:
    message_id: int
    began: float
    answered: float


async def send_all(
    broker: Broker,
    sender_tokens: list[str],
    recipients: list[str],
    count: int,
    priority: str,
    prefix: str,
    rate: float,
) -> list[Sent]:
    """Send `count` messages round-robin over `recipients`, one task per sender.

    rate 0: each sender sends its next message as soon as the last one was answered (closed
    loop, as many in flight as there are senders). rate > 0: message i leaves at i / rate s.
    """
    numbers = iter(range(count))
    sent: list[Sent] = []
    started = time.perf_counter()

    async def sender(token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=broker.url, headers=headers, timeout=60) as client:
            (await client.get("/v1/agents")).raise_for_status()  # open the keep-alive connection
            for n in numbers:
                if rate > 0:
                    delay = started + n / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                body = {
                    "to": recipients[n % len(recipients)],
                    "content": CONTENT,
                    "client_request_id": f"{prefix}-{n}",
                    "priority": priority,
                }
                began = time.perf_counter()
                response = await client.post("/v1/messages", json=body)
                answered = time.perf_counter()
                if response.status_code != 200 or response.json().get("status") != "stored":
                    raise SystemExit(f"send {n}: {response.status_code} {response.text[:300]}")
                sent.append(Sent(response.json()["message_id"], began, answered))

    await asyncio.gather(*(sender(token) for token in sender_tokens))
    return sent


async def wait_for_pushes(arrivals: Arrivals, message_ids: list[int], timeout: float) -> list[int]:
    """Wait until every id was pushed (or the timeout); return the ids never pushed."""
    deadline = time.perf_counter() + timeout
    while True:
        missing = [m for m in message_ids if m not in arrivals.at]
        remaining = deadline - time.perf_counter()
        if not missing or remaining <= 0:
            return missing
        arrivals.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrivals.changed.wait(), min(remaining, 0.5))


# ---------------------------------------------------------------- figures


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, int(-(-fraction * len(ordered) // 1)))  # ceil(fraction * n), at least 1
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class RunResult:
    priority: str
    count: int
    seconds: float  # first send to last answer
    push_seconds: float  # first send to last push frame
    push_ms: list[float]  # answer -> push frame, sorted
    send_ms: list[float]  # request -> answer, sorted
    early: int  # pushes that arrived before the HTTP answer (counted as 0 ms)
    missing: int
    notices: int

    def row(self, values: list[float]) -> str:
        p50, p90, p99 = (percentile(values, f) for f in (0.50, 0.90, 0.99))
        return f"p50 {p50:6.1f}  p90 {p90:6.1f}  p99 {p99:6.1f}  max {values[-1]:6.1f} ms"


async def timed_run(
    broker: Broker,
    sender_tokens: list[str],
    recipients: list[str],
    arrivals: Arrivals,
    args: argparse.Namespace,
    priority: str,
    prefix: str,
    count: int,
) -> RunResult:
    notices_before = arrivals.notices
    began = time.perf_counter()
    sent = await send_all(broker, sender_tokens, recipients, count, priority, prefix, args.rate)
    seconds = time.perf_counter() - began
    missing = await wait_for_pushes(arrivals, [s.message_id for s in sent], args.push_timeout)
    last_push = max(
        (arrivals.at[s.message_id] for s in sent if s.message_id in arrivals.at), default=began
    )
    gaps = [
        (arrivals.at[s.message_id] - s.answered) * 1000 for s in sent if s.message_id in arrivals.at
    ]
    return RunResult(
        priority=priority,
        count=count,
        seconds=seconds,
        push_seconds=last_push - began,
        push_ms=sorted(max(0.0, gap) for gap in gaps),
        send_ms=sorted((s.answered - s.began) * 1000 for s in sent),
        early=sum(1 for gap in gaps if gap < 0),
        missing=len(missing),
        notices=arrivals.notices - notices_before,
    )


async def latency_phase(root: Path, args: argparse.Namespace) -> list[RunResult]:
    broker = start_broker(root, "latency", broker_env(args.messages + args.warmup))
    bridges: list[Bridge] = []
    try:
        recipients = [f"recipient-{n:03d}" for n in range(args.recipients)]
        senders = [f"sender-{n}" for n in range(args.senders)]
        tokens = await provision(broker, LOBBY, recipients + senders)
        print(
            f"latency: provisioned {len(recipients)} recipients + {len(senders)} senders",
            flush=True,
        )
        connects = Connects()
        bridges = await open_bridges(
            broker, {name: tokens[name] for name in recipients}, args.connect_concurrency, connects
        )
        if connects.retried:
            print(f"latency: {len(connects.retried)} handshakes dropped and retried", flush=True)
        arrivals = Arrivals()
        for bridge in bridges:
            bridge.reader = asyncio.create_task(read_pushes(bridge, arrivals))
        print(f"latency: {len(bridges)} bridges connected and bootstrapped", flush=True)

        sender_tokens = [tokens[name] for name in senders]
        results = []
        if args.warmup:
            await timed_run(
                broker, sender_tokens, recipients, arrivals, args, "info", "warmup", args.warmup
            )
        for priority in ("info", "important"):
            await asyncio.sleep(0.5)  # let the previous run's acks and dispatcher ticks settle
            result = await timed_run(
                broker,
                sender_tokens,
                recipients,
                arrivals,
                args,
                priority,
                priority,
                args.messages,
            )
            print(f"latency: {priority:9} push {result.row(result.push_ms)}", flush=True)
            results.append(result)
        if arrivals.errors:
            print(f"latency: {len(arrivals.errors)} error frames, e.g. {arrivals.errors[0]}")
        return results
    except Exception:
        print(broker.log_text()[-4000:], file=sys.stderr)
        raise
    finally:
        await close_bridges(bridges)
        broker.stop()


@dataclass
class MemoryResult:
    connections: int
    before_mb: float
    after_mb: float
    peak_mb: float
    connect_seconds: float
    connects: Connects

    @property
    def per_connection_kb(self) -> float:
        return (self.after_mb - self.before_mb) * 1024 / self.connections


async def memory_phase(root: Path, args: argparse.Namespace) -> MemoryResult:
    broker = start_broker(root, "memory", broker_env(0))
    bridges: list[Bridge] = []
    try:
        names = [f"idle-{n:04d}" for n in range(args.connections)]
        tokens = await provision(broker, LOBBY, names)
        await asyncio.sleep(args.settle)
        before, _ = rss_mb(broker.pid)
        print(f"memory: {len(names)} agents provisioned; broker RSS {before:.1f} MB", flush=True)
        began = time.perf_counter()
        connects = Connects()
        bridges = await open_bridges(broker, tokens, args.connect_concurrency, connects)
        connect_seconds = time.perf_counter() - began
        arrivals = Arrivals()
        for bridge in bridges:
            bridge.reader = asyncio.create_task(read_pushes(bridge, arrivals))
        await asyncio.sleep(args.settle)
        after, peak = rss_mb(broker.pid)
        open_count = sum(1 for b in bridges if b.reader is not None and not b.reader.done())
        print(
            f"memory: {open_count} idle bridges connected in {connect_seconds:.1f} s; "
            f"broker RSS {after:.1f} MB (peak {peak:.1f} MB)",
            flush=True,
        )
        if open_count != args.connections:
            raise SystemExit(f"only {open_count} of {args.connections} sockets stayed open")
        return MemoryResult(args.connections, before, after, peak, connect_seconds, connects)
    except Exception:
        print(broker.log_text()[-4000:], file=sys.stderr)
        raise
    finally:
        await close_bridges(bridges)
        broker.stop()


def summary(runs: list[RunResult], memory: MemoryResult | None, args: argparse.Namespace) -> None:
    load = f"paced at {args.rate:g} msg/s" if args.rate > 0 else "closed loop"
    print()
    if runs:
        print(
            f"Push latency: {args.recipients} bridges, {args.messages} messages per run, "
            f"{args.senders} senders, {load}"
        )
        print(
            f"  {'priority':10} {'answer -> push frame':53} {'sends/s':>8} {'pushed/s':>8}  verdict"
        )
    for run in runs:
        verdict = "met" if percentile(run.push_ms, 0.99) < TARGET_P99_MS else "NOT met"
        print(
            f"  {run.priority:10} {run.row(run.push_ms):53} {run.count / run.seconds:8.1f} "
            f"{(run.count - run.missing) / run.push_seconds:8.1f}  "
            f"p99 < {TARGET_P99_MS:.0f} ms: {verdict}"
        )
    for run in runs:
        notes = [f"{run.notices} notices"]
        if run.early:
            notes.append(f"{run.early} pushes before the HTTP answer")
        if run.missing:
            notes.append(f"{run.missing} NEVER PUSHED")
        print(
            f"  {run.priority:10} send request -> answer: {run.row(run.send_ms)}; "
            + ", ".join(notes)
        )
    if memory is not None:
        verdict = "met" if memory.after_mb < TARGET_RSS_MB else "NOT met"
        print(f"Broker memory (VmRSS), {memory.connections} idle bridges")
        print(f"  before sockets   {memory.before_mb:8.1f} MB")
        print(
            f"  with sockets     {memory.after_mb:8.1f} MB   "
            f"(< {TARGET_RSS_MB:.0f} MB: {verdict}; peak {memory.peak_mb:.1f} MB)"
        )
        print(f"  per socket       {memory.per_connection_kb:8.1f} kB")
        handshakes = sorted(memory.connects.handshakes)
        print(
            f"  connect time     {memory.connect_seconds:8.1f} s for {memory.connections}, "
            f"{args.connect_concurrency} at a time (upgrade + welcome + bootstrap)"
        )
        print(
            f"  upgrade alone    p50 {percentile(handshakes, 0.5):.2f}  "
            f"p99 {percentile(handshakes, 0.99):.2f}  max {handshakes[-1]:.2f} s; "
            f"{len(memory.connects.retried)} dropped by the broker and retried"
        )
        if memory.connects.retried:
            print(f"    e.g. {memory.connects.retried[0]}")


async def run(args: argparse.Namespace) -> int:
    # SIGTERM (e.g. from `timeout`) cancels the run, so every broker started is still stopped.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    with tempfile.TemporaryDirectory(prefix="pocolobby-bench-") as temp:
        root = Path(temp)
        runs = await latency_phase(root, args) if args.messages else []
        memory = await memory_phase(root, args) if args.connections else None
    summary(runs, memory, args)
    failed = any(run.missing for run in runs)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages",
        type=int,
        default=1000,
        help="timed messages per priority run (0 skips the latency phase)",
    )
    parser.add_argument("--recipients", type=int, default=100, help="connected recipient bridges")
    parser.add_argument("--senders", type=int, default=4, help="concurrent sender agents")
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="messages per second overall; 0 = closed loop (send on answer)",
    )
    parser.add_argument("--warmup", type=int, default=100, help="untimed info messages first")
    parser.add_argument(
        "--connections",
        type=int,
        default=1000,
        help="idle bridges for the memory phase (0 skips it)",
    )
    parser.add_argument(
        "--connect-concurrency", type=int, default=50, help="WebSocket handshakes in flight at once"
    )
    parser.add_argument(
        "--push-timeout",
        type=float,
        default=600,
        help="seconds to wait, after the last send, for the last push",
    )
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds to wait before each memory reading"
    )
    args = parser.parse_args(argv)
    if args.messages and (args.recipients < 1 or args.senders < 1):
        parser.error("the latency phase needs at least one recipient and one sender")
    try:
        return asyncio.run(run(args))
    except asyncio.CancelledError:
        print("stopped by SIGTERM; the brokers were stopped", file=sys.stderr)
        return 143


if __name__ == "__main__":
    raise SystemExit(main())
