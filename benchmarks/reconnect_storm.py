"""A reconnect storm: after a broker restart, 1,000 bridges come back with their generations.

    .venv/bin/python benchmarks/reconnect_storm.py [--bridges 1000] [--concurrency 1000]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory), creates a lobby of N agents through the admin HTTP API and connects one real
WebSocket per agent to /v1/stream as a newly started bridge does (its own runtime id, no
generation): welcome, bootstrap notice, `received` and `host_written` answers. Each client
keeps the generation its welcome named. Then the broker is restarted (SIGTERM, same port and
data directory), which drops every socket, and all N clients reconnect at once, as their
bridges' reconnect loops do, stating their runtime id and generation. A bridge is resumed when
its welcome arrives with `bootstrap: false` and the same generation. Prints the time from the
first reconnect attempt to the last welcome (and the per-bridge p50/p99), the first connect's
time for comparison, and the target: all resumed within 5 s.

The N clients share one asyncio loop in this process, on the same machine as the broker: the
figures include the clients' own handshake work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from push_latency import percentile, provision, start_broker, stream_uri  # a sibling script

from lobbies.wire.frames import (
    EVENT_VERSION,
    EVENT_VERSION_HEADER,
    GENERATION_HEADER,
    RUNTIME_HEADER,
)

TARGET_SECONDS = 5.0
LOBBY = "storm"
ATTEMPTS = 20


@dataclass
class Bridge:
    name: str
    token: str
    runtime_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    generation: int | None = None
    socket: ClientConnection | None = None
    connected_after: float = 0.0  # seconds from the storm's start to the welcome
    retries: int = 0


async def answer(socket: ClientConnection, notice_id: str) -> None:
    for kind in ("received", "host_written"):
        await socket.send(json.dumps({"type": kind, "notice_id": notice_id}))


async def drain(bridge: Bridge) -> None:
    """Answer notices as a bridge would, until the socket closes."""
    assert bridge.socket is not None
    with contextlib.suppress(ConnectionClosed):
        async for raw in bridge.socket:
            frame = json.loads(raw)
            if frame.get("type") == "notice":
                await answer(bridge.socket, frame["notice_id"])


async def join(bridge: Bridge, uri: str, began: float, gate: asyncio.Semaphore) -> None:
    """Connect (a first start without a generation, a reconnect with one); read the welcome."""
    headers = {
        "Authorization": f"Bearer {bridge.token}",
        EVENT_VERSION_HEADER: str(EVENT_VERSION),
        RUNTIME_HEADER: bridge.runtime_id,
    }
    resuming = bridge.generation is not None
    if resuming:
        headers[GENERATION_HEADER] = str(bridge.generation)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            async with gate:
                socket = await connect(uri, additional_headers=headers, open_timeout=60)
                welcome = json.loads(await asyncio.wait_for(socket.recv(), 60))
            break
        except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
            if attempt == ATTEMPTS:
                raise SystemExit(f"{bridge.name}: could not connect: {exc!r}") from None
            bridge.retries += 1
            await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
    if welcome.get("type") != "welcome":
        raise SystemExit(f"{bridge.name}: expected a welcome, got {welcome}")
    if resuming and (welcome["bootstrap"] or welcome["generation"] != bridge.generation):
        raise SystemExit(f"{bridge.name}: not resumed: {welcome}")
    bridge.connected_after = time.perf_counter() - began
    bridge.generation = welcome["generation"]
    bridge.socket = socket
    if not resuming:
        notice = json.loads(await asyncio.wait_for(socket.recv(), 60))
        if notice.get("notice_kind") != "bootstrap":
            raise SystemExit(f"{bridge.name}: expected the bootstrap notice, got {notice}")
        await answer(socket, notice["notice_id"])


async def storm(bridges: list[Bridge], uri: str, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)
    began = time.perf_counter()
    await asyncio.gather(*(join(bridge, uri, began, gate) for bridge in bridges))
    return time.perf_counter() - began


def describe(label: str, seconds: float, bridges: list[Bridge]) -> str:
    after = sorted(b.connected_after for b in bridges)
    retries = sum(b.retries for b in bridges)
    return (
        f"{label}: {len(bridges)} bridges in {seconds:.2f} s "
        f"(welcome after p50 {percentile(after, 0.5):.2f} s, p99 {percentile(after, 0.99):.2f} s;"
        f" {retries} attempts retried)"
    )


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="pocolobby-storm-") as temp:
        env = {"POCOLOBBY_LOG_LEVEL": "WARNING"}
        broker = start_broker(Path(temp), "storm", env)
        bridges: list[Bridge] = []
        try:
            names = [f"bridge-{n:04d}" for n in range(args.bridges)]
            tokens = await provision(broker, LOBBY, names)
            bridges = [Bridge(name, tokens[name]) for name in names]
            uri = stream_uri(broker)
            first = await storm(bridges, uri, args.connect_concurrency)
            print(describe("first start  ", first, bridges), flush=True)
            readers = [asyncio.create_task(drain(b)) for b in bridges]
            await asyncio.sleep(args.settle)  # let the bootstrap answers be recorded
            stop_began = time.perf_counter()
            await asyncio.to_thread(broker.restart)
            restart = time.perf_counter() - stop_began
            await asyncio.wait_for(asyncio.gather(*readers), 30)  # every socket saw the drop
            for bridge in bridges:
                bridge.socket, bridge.connected_after, bridge.retries = None, 0.0, 0
            resumed = await storm(bridges, uri, args.concurrency)
            print(f"broker restart: {restart:.2f} s (stop, start, ready)", flush=True)
            print(describe("after restart", resumed, bridges), flush=True)
            verdict = "met" if resumed <= TARGET_SECONDS else "NOT met"
            print(
                f"all {len(bridges)} resumed with their generations in {resumed:.2f} s "
                f"(target <= {TARGET_SECONDS:.0f} s: {verdict}); first start took {first:.2f} s"
            )
        except BaseException:
            print(broker.log_text()[-4000:], file=sys.stderr)
            raise
        finally:
            await asyncio.gather(
                *(b.socket.close() for b in bridges if b.socket is not None),
                return_exceptions=True,
            )
            broker.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bridges", type=int, default=1000)
    parser.add_argument(
        "--concurrency", type=int, default=1000, help="reconnects in flight at once (the storm)"
    )
    parser.add_argument(
        "--connect-concurrency", type=int, default=50, help="first connects in flight at once"
    )
    parser.add_argument("--settle", type=float, default=2.0)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
