"""CPU of one durable send on the database thread, without HTTP: alone and in shared commits.

    .venv/bin/python benchmarks/send_inprocess.py [--sends 3000] [--durable] [--sizes 1,4,8]
        [--code CHECKOUT]

The broker's own CPU per send (`send_throughput.py`) swings by a third with the machine's
minute; this measures only the work a send gives the database thread, in this process:

1. Starts the real broker once to provision a lobby with two agents (the real CLI), stops
   it, and keeps its store.
2. Sets the settings a `serve` would (the store's data directory, lifted send and queue
   bounds) and a running event loop for the wakes, then serves `POST /v1/messages` through
   the fast lane's own functions (`lobbies.fastlane.lane._serve_api` alone, `_serve_together` for
   shared commits) on the process's connection, as the database thread does.
3. Counts the thread's CPU time around each call only (`time.thread_time`). Every 200 sends
   the recipients' queues are marked seen and the sends moved out of the rate window,
   uncounted, so the bound counts stay the size the default bounds allow.
4. Without `--durable` the connection runs `synchronous=OFF`: the fsync's cost, which varies
   most, stays out, and a change to our code shows as itself. Prints microseconds of CPU a
   send, alone and in commits of 4 and 8 (`--sizes`), median of `--rounds`.

`--code` serves the broker code of another checkout (an earlier commit, for a before/after)
with this harness; `benchmarks/send_instructions.py` runs it under valgrind to count
instructions, which do not swing with the machine's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

DRAIN_EVERY = 200
WARMUP = 96  # sends, a multiple of each batch size
CONTENT = "x" * 200


def _first_module(*names: str) -> Any:
    """The first of these modules that exists in the checkout under test."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module(names[-1])


def provision(root: Path) -> list[dict[str, Any]]:
    # local: imported from the checkout `--code` names, put on the path by main()
    from tests.server import Broker

    broker = Broker(root / "data")
    broker.start()
    try:
        configs = broker.provision("bench", ["alice", "bob"], root / "configs")
    finally:
        broker.stop()
    return [json.loads(configs[name].path.read_text()) for name in ("alice", "bob")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=3000, help="timed sends per measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--durable", action="store_true", help="keep synchronous=FULL")
    parser.add_argument("--sizes", default="1,4,8", help="sends a commit, comma-separated")
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout to serve")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    sys.path.insert(0, str(args.code.resolve()))

    with tempfile.TemporaryDirectory(prefix="pocolobby-inprocess-") as temp:
        root = Path(temp)
        configs = provision(root)
        template = root / "template.sqlite3"
        # The backup API, not a file copy: the last rows may still be in the WAL.
        with (
            closing(sqlite3.connect(root / "data" / "pocolobby.sqlite3")) as kept,
            closing(sqlite3.connect(template)) as copy,
        ):
            kept.backup(copy)
        os.environ.update(
            {
                "POCOLOBBY_DATA_DIR": str(root / "data"),
                "POCOLOBBY_LOG_LEVEL": "WARNING",
                "POCOLOBBY_SENDS_PER_MINUTE": "1000000",
                "POCOLOBBY_QUEUED_MESSAGES": "1000000",
                "POCOLOBBY_NOTICES_PER_MINUTE": "1000000",
                "DJANGO_SETTINGS_MODULE": "pocolobby.settings",
            }
        )
        # local: Django is set up by importing the ASGI application, after the settings above
        from django.core.handlers.asgi import ASGIRequest
        from django.db import connection

        importlib.import_module("pocolobby.asgi")
        # Either layout, so send_instructions.py can count a checkout from before the move.
        lane = _first_module("lobbies.fastlane.lane", "pocolobby.asgi")
        events = _first_module("lobbies.push.events", "lobbies.events")
        from tests.fast_lane import agent_post

        # Wakes go to a running loop, as under `serve` (else each would start one of its own).
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        events.SERVER_LOOP["loop"] = loop

        counter = iter(range(10**9))

        def request() -> ASGIRequest:
            n = next(counter)
            sender, recipient = configs[n % 2], configs[(n + 1) % 2]
            body = {"to": recipient["agent"], "content": CONTENT, "client_request_id": f"s-{n}"}
            return agent_post(sender["token"], body)

        def drain() -> None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE lobbies_delivery SET state = 'seen', agent_seen_at = delivered_at "
                    "WHERE state = 'pending'"
                )
                cursor.execute(
                    "UPDATE lobbies_message SET created_at = datetime(created_at, '-5 minutes')"
                    " WHERE created_at > datetime('now', '-5 minutes')"
                )

        def measure(size: int) -> float:
            connection.close()
            for suffix in ("-wal", "-shm"):
                (root / "data" / f"pocolobby.sqlite3{suffix}").unlink(missing_ok=True)
            shutil.copy(template, root / "data" / "pocolobby.sqlite3")
            connection.ensure_connection()
            if not args.durable:
                connection.connection.execute("PRAGMA synchronous=OFF")
            spent, counted = 0.0, 0
            for done in range(-WARMUP, args.sends, size):  # the warm-up is not counted
                if done % DRAIN_EVERY < size:
                    drain()
                batch = [request() for _ in range(size)]
                began = time.thread_time()
                answers = [lane._serve_api(batch[0])] if size == 1 else lane._serve_together(batch)
                if done >= 0:
                    spent += time.thread_time() - began
                    counted += size
                for answer in answers:
                    if getattr(answer, "status_code", None) != 200:
                        body = getattr(answer, "content", b"")[:300]
                        raise SystemExit(f"a send was not stored: {answer!r} {body!r}")
            return spent / counted * 1e6

        mode = "synchronous=FULL" if args.durable else "synchronous=OFF"
        for size in sizes:
            runs = sorted(measure(size) for _ in range(args.rounds))
            label = "alone" if size == 1 else f"{size} a commit"
            print(
                f"{label:<11}: {statistics.median(runs):.0f} us of CPU a send ({mode}; "
                f"runs {', '.join(f'{r:.0f}' for r in runs)})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
