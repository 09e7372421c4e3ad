"""Broadcast fan-out: from a broadcast's answer to its push reaching the last of 100 bridges.

    .venv/bin/python benchmarks/broadcast_fanout.py [--recipients 100] [--broadcasts 50] [--gap 0.3]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory), creates a lobby of N recipient agents and one sender allowed to broadcast through
the admin HTTP API, and connects one real WebSocket per recipient to /v1/stream as a bridge
does (welcome, bootstrap, and `received` + `host_written` for every notice). Then the sender
broadcasts M messages over HTTP (`POST /v1/tools/broadcast`), one at a time with a gap
between them, and for each one the script stamps, on one clock, the arrival of the send's
answer and of the push frame naming the message at each of the N bridges. Prints, over the
M broadcasts, the time from the answer to the LAST bridge's push (p50, p99, max) and to each
bridge (p50, p99), once for `info` (which waits the push batching delay by design) and once
for `important`. Target: the last bridge within 100 ms p99.

The bridges share one asyncio loop in this process, on the machine the broker runs on: the
figures include this process's own scheduling delay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from push_latency import (  # a sibling script, not a package
    Bridge,
    Connects,
    acknowledge,
    broker_env,
    close_bridges,
    open_bridges,
    percentile,
    provision,
    start_broker,
)

TARGET_P99_MS = 100.0
LOBBY = "fanout"
CONTENT = "Release freeze at 18:00 UTC: land or park your branches. " * 2


async def stamp_pushes(bridge: Bridge, arrivals: dict[int, dict[str, float]]) -> None:
    """Record when each pushed message id first reached this bridge (a re-push or a hint
    naming it again does not count); answer notices as a bridge does."""
    with contextlib.suppress(ConnectionClosed):
        async for raw in bridge.socket:
            now = time.perf_counter()
            frame = json.loads(raw)
            if frame.get("type") == "notice":
                for message_id in frame.get("message_ids", []):
                    arrivals[message_id].setdefault(bridge.name, now)
                await acknowledge(bridge.socket, frame)


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="pocolobby-fanout-") as temp:
        # Recipients never acknowledge here: their queues must hold every broadcast.
        broker = start_broker(Path(temp), "fanout", broker_env(4 * args.broadcasts))
        bridges: list[Bridge] = []
        try:
            names = [f"recipient-{n:03d}" for n in range(args.recipients)]
            tokens = await provision(broker, LOBBY, names)
            admin = {"Authorization": f"Bearer {broker.admin_token}"}
            answer = httpx.post(
                f"{broker.url}/v1/admin/lobbies/{LOBBY}/agents",
                json={"agent_id": "announcer", "broadcast": True},
                headers=admin,
            )
            if answer.status_code != 201:
                raise SystemExit(f"sender: {answer.status_code} {answer.text[:300]}")
            sender = answer.json()["token"]
            bridges = await open_bridges(broker, tokens, 50, Connects())
            arrivals: dict[int, dict[str, float]] = defaultdict(dict)
            for bridge in bridges:
                bridge.reader = asyncio.create_task(stamp_pushes(bridge, arrivals))
            print(f"{len(bridges)} bridges connected and bootstrapped", flush=True)
            headers = {"Authorization": f"Bearer {sender}"}
            results = []
            async with httpx.AsyncClient(base_url=broker.url, headers=headers, timeout=60) as c:
                for priority in ("info", "important"):
                    answered: dict[int, float] = {}
                    for n in range(args.warmup + args.broadcasts):
                        body = {
                            "content": CONTENT,
                            "client_request_id": f"{priority}-{n}",
                            "priority": priority,
                        }
                        response = await c.post("/v1/tools/broadcast", json=body)
                        at = time.perf_counter()
                        if response.status_code != 200:
                            raise SystemExit(f"broadcast: {response.status_code} {response.text}")
                        result = response.json()
                        if n >= args.warmup:
                            answered[result["message_id"]] = at
                        await asyncio.sleep(args.gap)
                    deadline = time.perf_counter() + 60
                    while time.perf_counter() < deadline and any(
                        len(arrivals[m]) < len(bridges) for m in answered
                    ):
                        await asyncio.sleep(0.05)
                    last, each, missing = [], [], 0
                    for message_id, at in answered.items():
                        seen = list(arrivals[message_id].values())
                        missing += len(bridges) - len(seen)
                        if seen:
                            last.append((max(seen) - at) * 1000)
                            each += [max(0.0, s - at) * 1000 for s in seen]
                    results.append((priority, sorted(last), sorted(each), missing))
            print(
                f"{args.broadcasts} broadcasts to {len(bridges)} connected bridges, "
                f"{args.gap * 1000:.0f} ms apart; time from the send's answer to the push frame"
            )
            for priority, last, each, missing in results:
                if not last:
                    print(f"  {priority:9} NO push arrived ({missing} missing)")
                    continue
                p99 = percentile(last, 0.99)
                verdict = "met" if p99 <= TARGET_P99_MS and not missing else "NOT met"
                print(
                    f"  {priority:9} last bridge: p50 {percentile(last, 0.5):6.1f}  p99 "
                    f"{p99:6.1f}  max {last[-1]:6.1f} ms; every bridge: p50 "
                    f"{percentile(each, 0.5):6.1f}  p99 {percentile(each, 0.99):6.1f} ms"
                    f"{f'; {missing} pushes MISSING' if missing else ''}  "
                    f"(target last p99 <= {TARGET_P99_MS:.0f} ms: {verdict})"
                )
        except BaseException:
            print(broker.log_text()[-4000:], file=sys.stderr)
            raise
        finally:
            await close_bridges(bridges)
            broker.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipients", type=int, default=100)
    parser.add_argument("--broadcasts", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between broadcasts")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
