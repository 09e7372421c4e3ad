"""The dashboard's render time on a busy lobby: 50 agents and 100,000 messages in 24 hours.

Builds a real PocoLobby SQLite store (`pocolobby init`), fills one lobby with 50 agents, live
connections and 100,000 messages of the last 24 hours (80% direct, each with its delivery;
the rest broadcasts), then renders the whole dashboard and its agents part in-process through
Django's test client as the local operator, and prints the medians against the 100 ms bar,
and the first render after a start, which counts every quarter hour of the day (later ones
count only the quarter hours still open).

    .venv/bin/python benchmarks/dashboard_render.py [--agents 50] [--messages 100000] [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harness import django_on_store, operator_client, stamp, timed_get  # a sibling script

BAR_MS = 100.0


def build_store(
    data_dir: Path, agents: int, count: int, text: Callable[[random.Random], str] | None = None
) -> None:
    """The store described above; `text(rng)` gives each message its content ('x' if None)."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["POCOLOBBY_DATA_DIR"] = str(data_dir)
    subprocess.run(
        [sys.executable, "-m", "pocolobby", "init"], env=env, check=True, capture_output=True
    )
    db = sqlite3.connect(data_dir / "pocolobby.sqlite3")
    now = datetime.now(UTC).replace(tzinfo=None)

    db.execute(
        "INSERT INTO lobbies_lobby (name, created_at, message_sequence, delivery_paused,"
        " agents_may_watch) VALUES (?, ?, ?, 0, 0)",
        ("bench", stamp(now), count),
    )
    agent_cols = (
        "lobby_id, agent_id, description, role, enabled, manage_rooms, broadcast, status_line, "
        "owner_request_count, owner_request_line, owner_requests_updated_at, receipt_sequence, "
        "runtime_generation, backlog_sequence, bootstrap_nonce, bootstrap_attempts, "
        "notify_attempts, notification_attention_required, resting, created_at"
    )
    for n in range(agents):
        waiting = 1 if n % 10 == 0 else 0
        db.execute(
            f"INSERT INTO lobbies_agent ({agent_cols}) VALUES "
            "(1, ?, '', '', 1, 0, 0, ?, ?, ?, ?, 0, 1, 0, '', 0, 0, 0, 0, ?)",
            (
                f"agent-{n:02d}",
                f"working on item {n}",
                waiting,
                "approve a change" if waiting else "",
                stamp(now - timedelta(minutes=n)) if waiting else None,
                stamp(now),
            ),
        )
    process = uuid.uuid4().hex
    db.execute(
        "INSERT INTO lobbies_brokerprocess (id, started_at, last_seen_at) VALUES (?, ?, ?)",
        (process, stamp(now), stamp(now + timedelta(hours=1))),
    )
    db.executemany(
        "INSERT INTO lobbies_connection (agent_id, process_id, generation, connected_at,"
        " last_heartbeat_at, transport, held_reason) VALUES (?, ?, 1, ?, ?, 'channel', '')",
        [(pk, process, stamp(now), stamp(now)) for pk in range(1, agents + 1, 2)],
    )
    rng = random.Random(7)
    batch = 20_000
    for start in range(0, count, batch):
        messages, deliveries = [], []
        for n in range(start, min(count, start + batch)):
            at = stamp(now - timedelta(seconds=rng.randrange(0, 86_000)))
            sender = rng.randrange(1, agents + 1)
            direct = n % 5 != 0
            scope = "direct" if direct else "broadcast"
            content = "x" if text is None else text(rng)
            size = len(content.encode())
            name = f"agent-{sender - 1:02d}"
            messages.append((n + 1, n + 1, sender, name, scope, content, size, f"b-{n}", at))
            if direct:
                recipient = rng.randrange(1, agents + 1)
                deliveries.append((n + 1, recipient, size, at, at))
        db.executemany(
            "INSERT INTO lobbies_message (id, lobby_id, sequence, sender_id, sender_name, scope,"
            " reply_expected, priority, content, content_bytes, fields, correlation_id,"
            " client_request_id, notify_when_seen, request_hash, room_name, addressed_to,"
            " scheduled_pending, late, created_at) VALUES"
            " (?, 1, ?, ?, ?, ?, 0, 'info', ?, ?, '{}', '', ?, 0, '', '', '[]', 0, 0, ?)",
            messages,
        )
        db.executemany(
            "INSERT INTO lobbies_delivery (message_id, recipient_id, state, content_bytes,"
            " delivered_at, agent_seen_at, redacted) VALUES (?, ?, 'seen', ?, ?, ?, 0)",
            deliveries,
        )
        db.commit()
    db.execute("ANALYZE")
    db.commit()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="pocolobby-dashboard-"))
    started = time.perf_counter()
    build_store(data_dir, args.agents, args.messages)
    print(
        f"built a store of {args.agents} agents and {args.messages:,} messages "
        f"in {time.perf_counter() - started:.0f} s"
    )

    django_on_store(data_dir)
    client = operator_client()
    from board.strip import SETTLED  # local: after django.setup()

    def cold(path: str) -> float:
        """A render right after a start: every quarter hour of the day counted (templates
        and imports warmed by one render first, as they are after any first page)."""
        client.get(path)
        SETTLED.forget()
        t = time.perf_counter()
        response = client.get(path)
        assert response.status_code == 200, response.content[:300]
        return (time.perf_counter() - t) * 1000

    print(f"first render after a start (all 96 quarter hours counted): {cold('/bench/'):.1f} ms")

    for label, path in (("whole dashboard", "/bench/"), ("agents part", "/bench/parts/agents")):
        times, queries, size = timed_get(client, path, args.runs)
        median = statistics.median(times)
        print(
            f"{label:<16}: median {median:.1f} ms, max {max(times):.1f} ms over {args.runs} runs; "
            f"{queries} queries, {size / 1024:.0f} KiB; {median / BAR_MS:.2f} of the 100 ms bar"
        )


if __name__ == "__main__":
    main()
