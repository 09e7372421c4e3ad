"""The messages page's server time on a busy lobby: 100,000 messages in the last 24 hours.

Builds the same store as dashboard_render.py (50 agents, 100,000 messages of the day, 80%
direct with a delivery each), gives the messages varied text, then renders the messages page
in-process through Django's test client as the local operator: unfiltered, a deep page, and
each filter, including the ones that match nothing (they scan the whole day). Prints medians
against the 100 ms bar.

    .venv/bin/python benchmarks/messages_page.py [--messages 100000] [--runs 15] [--store DIR]

--store DIR measures a store an earlier run built (its data directory is printed) instead of
building one, so query shapes can be compared on the same rows (migrate it first with
`POCOLOBBY_DATA_DIR=DIR manage.py migrate` to measure newer indexes). Its messages were
stamped at build time, so a store built long ago has fewer of them in the last day.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_render import BAR_MS, build_store  # sibling scripts, not a package
from harness import django_on_store, operator_client, stamp, timed_get


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--store", type=Path, default=None)
    args = parser.parse_args()
    if args.store is None:
        data_dir = Path(tempfile.mkdtemp(prefix="pocolobby-messages-"))
        build(data_dir, args)
    else:
        data_dir = args.store
    measure(data_dir, args)


def build(data_dir: Path, args: argparse.Namespace) -> None:
    now = datetime.now(UTC).replace(tzinfo=None)

    started = time.perf_counter()
    build_store(data_dir, args.agents, args.messages)
    db = sqlite3.connect(data_dir / "pocolobby.sqlite3")
    db.execute(
        "UPDATE lobbies_message SET content = 'status report ' || id || ' about item ' || "
        "(id % 97) || ': the build is green and the review is waiting on the owner', "
        "kind = CASE WHEN id % 7 = 0 THEN 'request' ELSE NULL END, "
        "priority = CASE WHEN id % 500 = 0 THEN 'important' ELSE 'info' END"
    )
    # Sequences follow acceptance time, as the send path hands them out.
    db.executemany(
        "UPDATE lobbies_message SET created_at = ? WHERE id = ?",
        [
            (stamp(now - timedelta(seconds=(args.messages - n) * 0.86)), n)
            for n in range(1, args.messages + 1)
        ],
    )
    db.execute(
        "UPDATE lobbies_delivery SET delivered_at = (SELECT created_at FROM lobbies_message m"
        " WHERE m.id = message_id), agent_seen_at = (SELECT created_at FROM lobbies_message m"
        " WHERE m.id = message_id)"
    )
    # Three rooms; one message in 20 goes to one of them (a busy room, a quiet one, one
    # that spoke only in the first hour): the room filter reads the day from a room's view.
    for name in ("design", "release", "old-room"):
        db.execute(
            "INSERT INTO lobbies_room (lobby_id, room_id, created_at) VALUES (1, ?, ?)",
            (name, stamp(now - timedelta(days=2))),
        )
    rooms = dict(db.execute("SELECT room_id, id FROM lobbies_room"))
    db.execute(
        "UPDATE lobbies_message SET scope = 'room', room_id = ?, room_name = 'design'"
        " WHERE id % 20 = 0",
        (rooms["design"],),
    )
    db.execute(
        "UPDATE lobbies_message SET scope = 'room', room_id = ?, room_name = 'release'"
        " WHERE id % 500 = 3",
        (rooms["release"],),
    )
    db.execute(
        "UPDATE lobbies_message SET scope = 'room', room_id = ?, room_name = 'old-room'"
        " WHERE id % 20 = 7 AND id < ?",
        (rooms["old-room"], args.messages // 24),
    )
    db.execute("ANALYZE")
    db.commit()
    db.close()
    print(
        f"built a store of {args.agents} agents and {args.messages:,} messages "
        f"in {time.perf_counter() - started:.0f} s, in {data_dir}"
    )


def measure(data_dir: Path, args: argparse.Namespace) -> None:
    django_on_store(data_dir)
    client = operator_client()
    middle = args.messages // 2
    cases = [
        ("newest page", "/bench/messages"),
        ("live part", "/bench/parts/messages"),
        ("a page mid-day", f"/bench/messages?before={middle}"),
        ("one agent", "/bench/messages?agent=agent-07"),
        ("kind request", "/bench/messages?kind=request"),
        ("text, common", "/bench/messages?q=item+42"),
        ("text, no match", "/bench/messages?q=no-such-words"),
        ("important (0.2%)", "/bench/messages?priority=important"),
        ("agent+text", "/bench/messages?agent=agent-07&q=item+42"),
        ("room (5%)", "/bench/messages?room=design"),
        ("room (0.2%)", "/bench/messages?room=release"),
        ("room, early only", "/bench/messages?room=old-room"),
        ("agent+kind", "/bench/messages?agent=agent-07&kind=request"),
        ("agent+room", "/bench/messages?agent=agent-07&room=design"),
        ("agent+important", "/bench/messages?agent=agent-07&priority=important"),
        ("kind+important", "/bench/messages?kind=request&priority=important"),
        ("room+text", "/bench/messages?room=design&q=item+42"),
    ]
    worst = 0.0
    for label, path in cases:
        times, queries, size = timed_get(client, path, args.runs)
        median = statistics.median(times)
        worst = max(worst, median)
        print(
            f"{label:<18}: median {median:6.1f} ms, min {min(times):6.1f} ms, "
            f"max {max(times):6.1f} ms over {args.runs} "
            f"runs; {queries} queries, {size / 1024:.0f} KiB; {median / BAR_MS:.2f} of the bar"
        )
    print(f"slowest median: {worst:.1f} ms = {worst / BAR_MS:.2f} of the 100 ms bar")


if __name__ == "__main__":
    main()
