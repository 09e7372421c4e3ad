"""Reading 400 messages over HTTP in two pages of 200, from a real broker.

    .venv/bin/python benchmarks/read_http.py [--messages 400] [--runs 30]

Starts the real broker (`python -m pocolobby serve`, embedded SQLite, a temporary data
directory), creates a lobby with a reader and a writer through the admin HTTP API, and sends
400 messages from the writer to the reader over HTTP (every one stays pending, so the
reader's inbox and history both hold 400). Then, on one keep-alive connection of the
reader's (the standard library's `http.client`), times reading them as an agent does:
`GET /v1/messages?limit=200` and the next page through its cursor, for the inbox and for
the history. Each pair is checked to return all 400 messages, once each. Prints the median
and p90 of a pair's wall time (request to last byte, this process's clock) and the broker
process's CPU time per pair (user + system from /proc/<pid>/stat, over all runs), against
the target: two pages of 200 over HTTP in <= 25 ms.

The client shares the machine with the broker: a pair's wall time includes the client's own
JSON parsing and any wait for a CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from push_latency import provision, start_broker  # a sibling script, not a package
from send_throughput import cpu_seconds  # a sibling script, not a package

TARGET_MS = 25.0
PAGE = 200
LOBBY = "reads"
CONTENT = "Review the auth change in api/session.py before the release branch is cut. " * 2


async def fill(url: str, token: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    gate = asyncio.Semaphore(4)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:

        async def one(n: int) -> None:
            async with gate:
                body = {
                    "to": "reader",
                    "content": f"{CONTENT} ({n})",
                    "client_request_id": f"fill-{n}",
                }
                answer = await client.post("/v1/messages", json=body)
            if answer.status_code != 200:
                raise SystemExit(f"send {n}: {answer.status_code} {answer.text[:300]}")

        await asyncio.gather(*(one(n) for n in range(count)))


def read_all(client: http.client.HTTPConnection, token: str, view: str) -> list[int]:
    """Every message of `view`, a page of 200 at a time; the message ids in order."""
    headers = {"Authorization": f"Bearer {token}"}
    ids: list[int] = []
    cursor = None
    while True:
        query = {"view": view, "limit": PAGE, **({"cursor": cursor} if cursor else {})}
        client.request("GET", f"/v1/messages?{urlencode(query)}", headers=headers)
        response = client.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"{view}: {response.status} {body[:300]!r}")
        page = json.loads(body)
        ids += [m["message_id"] for m in page["messages"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pocolobby-reads-") as temp:
        env = {
            "POCOLOBBY_LOG_LEVEL": "WARNING",
            "POCOLOBBY_SENDS_PER_MINUTE": str(args.messages + 1000),
            "POCOLOBBY_QUEUED_MESSAGES": str(args.messages + 1000),
        }
        broker = start_broker(Path(temp), "reads", env)
        try:
            tokens = asyncio.run(provision(broker, LOBBY, ["reader", "writer"]))
            asyncio.run(fill(broker.url, tokens["writer"], args.messages))
            client = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=60)
            print(
                f"{args.messages} messages pending for the reader; pages of {PAGE} over one "
                "keep-alive connection; medians over "
                f"{args.runs} runs (wall = request to last byte, cpu = broker process, mean)"
            )
            for view in ("inbox", "history"):
                for _ in range(3):  # warm: connection, caches
                    ids = read_all(client, tokens["reader"], view)
                if len(ids) != args.messages or len(set(ids)) != args.messages:
                    raise SystemExit(f"{view}: read {len(ids)} messages, expected {args.messages}")
                walls = []
                cpu = cpu_seconds(broker.pid)  # in clock ticks (10 ms): read over all runs
                for _ in range(args.runs):
                    began = time.perf_counter()
                    read_all(client, tokens["reader"], view)
                    walls.append((time.perf_counter() - began) * 1000)
                cpu_ms = (cpu_seconds(broker.pid) - cpu) * 1000 / args.runs
                walls.sort()
                wall = statistics.median(walls)
                verdict = "met" if wall <= TARGET_MS else "NOT met"
                print(
                    f"{view:<8}: {args.messages} in {-(-args.messages // PAGE)} pages: wall "
                    f"p50 {wall:.1f} ms, p90 {walls[int(0.9 * len(walls))]:.1f} ms; broker cpu "
                    f"{cpu_ms:.1f} ms a pair (target <= {TARGET_MS:.0f} ms "
                    f"wall: {verdict})"
                )
            client.close()
        except BaseException:
            print(broker.log_text()[-4000:], file=sys.stderr)
            raise
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
