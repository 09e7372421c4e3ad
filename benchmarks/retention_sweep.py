"""The retention sweep's cost when nothing is due, on a store of 1,000,000 messages.

Builds a real PocoLobby SQLite store (the broker's own schema, via `pocolobby init`), fills it
with messages and deliveries that are all younger than a day, then times `sweep()` and one
dispatcher tick, and checks that neither opened a write. Target: a few milliseconds.

    .venv/bin/python benchmarks/retention_sweep.py [--messages 1000000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def build_store(data_dir: Path, count: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["POCOLOBBY_DATA_DIR"] = str(data_dir)
    subprocess.run(
        [sys.executable, "-m", "pocolobby", "init"], env=env, check=True, capture_output=True
    )
    db = sqlite3.connect(data_dir / "pocolobby.sqlite3")
    now = datetime.now(UTC).replace(tzinfo=None)
    stamp = now.strftime("%Y-%m-%d %H:%M:%S.%f")
    db.execute(
        "INSERT INTO lobbies_lobby (name, created_at, message_sequence, delivery_paused)"
        " VALUES (?, ?, ?, 0)",
        ("bench", stamp, count),
    )
    agent_cols = (
        "lobby_id, agent_id, description, role, enabled, manage_rooms, broadcast, status_line, "
        "owner_request_count, owner_request_line, receipt_sequence, runtime_generation, "
        "backlog_sequence, bootstrap_nonce, bootstrap_attempts, notify_attempts, "
        "notification_attention_required, resting, created_at"
    )
    for name in ("sender", "recipient"):
        db.execute(
            f"INSERT INTO lobbies_agent ({agent_cols}) VALUES "
            "(1, ?, '', '', 1, 0, 0, '', 0, '', 0, 0, 0, '', 0, 0, 0, 0, ?)",
            (name, stamp),
        )
    batch = 50_000
    for start in range(0, count, batch):
        rows = []
        for n in range(start, min(count, start + batch)):
            # Spread over the last 23 hours: nothing is due.
            at = (now - timedelta(seconds=(n % 82_800))).strftime("%Y-%m-%d %H:%M:%S.%f")
            rows.append((n + 1, n + 1, at, at, f"bench-{n}"))
        db.executemany(
            "INSERT INTO lobbies_message (id, lobby_id, sequence, sender_id, sender_name, scope,"
            " reply_expected, priority, content, content_bytes, fields, correlation_id,"
            " client_request_id, notify_when_seen, request_hash, room_name, addressed_to,"
            " scheduled_pending, late, created_at, delivered_at) VALUES"
            " (?, 1, ?, 1, 'sender', 'direct', 0, 'info', 'x', 1, '{}', '', ?, 0, '', '',"
            " '[]', 0, 0, ?, ?)",
            [(i, seq, key, at, at2) for i, seq, at, at2, key in rows],
        )
        db.executemany(
            "INSERT INTO lobbies_delivery (message_id, recipient_id, state, content_bytes,"
            " delivered_at, agent_seen_at, redacted) VALUES (?, 2, 'seen', 1, ?, ?, 0)",
            [(i, at, at) for i, _, at, _, _ in rows],
        )
        db.commit()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="pocolobby-sweep-"))
    started = time.perf_counter()
    build_store(data_dir, args.messages)
    print(f"built a store of {args.messages:,} messages in {time.perf_counter() - started:.0f} s")

    os.environ["POCOLOBBY_DATA_DIR"] = str(data_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "pocolobby.settings"
    # local: the data directory and settings module are chosen above, before Django loads
    import django

    django.setup()
    # local: models and settings are usable only after django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from lobbies.actions.retention import sweep
    from lobbies.push import timers
    from pocolobby import loops

    def timed(fn: object) -> tuple[list[float], list[str]]:
        times, writes = [], []
        for _ in range(args.runs):
            with CaptureQueriesContext(connection) as queries:
                t = time.perf_counter()
                fn()  # type: ignore[operator]
                times.append((time.perf_counter() - t) * 1000)
            writes += [
                q["sql"]
                for q in queries.captured_queries
                if not q["sql"].lstrip().upper().startswith("SELECT")
            ]
        return times, writes

    sweep_times, sweep_writes = timed(lambda: sweep(timezone.now()))
    timers._last_sweep.clear()
    tick_times, tick_writes = timed(
        lambda: (timers._last_sweep.clear(), loops.tick(timezone.now()))
    )
    with connection.cursor() as cursor:
        t = time.perf_counter()
        cursor.execute("SELECT COUNT(*) FROM lobbies_message")
        total = cursor.fetchone()[0]
        count_ms = (time.perf_counter() - t) * 1000

    print(f"messages in the store         : {total:,}")
    print(
        f"sweep, nothing due            : median {statistics.median(sweep_times):.2f} ms, "
        f"max {max(sweep_times):.2f} ms over {args.runs} runs; writes: {len(sweep_writes)}"
    )
    print(
        f"dispatcher tick incl. sweep   : median {statistics.median(tick_times):.2f} ms, "
        f"max {max(tick_times):.2f} ms; writes: {len(tick_writes)}"
    )
    print(
        f"for scale, one COUNT(*) scan  : {count_ms:.1f} ms "
        f"(sweep/scan ratio {statistics.median(sweep_times) / count_ms:.4f})"
    )


if __name__ == "__main__":
    main()
