"""History search over a day of 100,000 messages, on the embedded default (SQLite FTS5).

Builds a real store (`pocolobby init`, then rows written directly: 10 agents, 100,000 messages
of the last 24 hours, 80% direct with a delivery each, the rest broadcasts) whose messages
carry varied text: sentences from a vocabulary of ~150 words, file names and ticket numbers
that repeat rarely, and a few non-ASCII words. The search index is kept by the migration's
insert trigger, as a send keeps it. Then times, in-process,
`get_messages` history searches by one agent (its history: ~18,000 of the day's messages), a
page of 200, for queries of several kinds: rare identifiers, a medium and a common word, a
phrase, a query that matches nothing, and Unicode queries in another case than the text.
Each query runs in three implementations in alternation, after checking they return the same
page (`LIKE` excepted for Unicode: it folds ASCII only): `LIKE` row by row (before migration
0013), every index match then the page (0013 as first merged), and the current selector
(index matches newest first, a window at a time). Prints medians per query (wall and CPU) and
the p50 over every timed search of each. Target: p50 <= 20 ms.

    .venv/bin/python benchmarks/search.py [--messages 100000] [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_render import build_store  # sibling scripts, not a package
from harness import django_on_store

TARGET_MS = 20.0
PAGE = 200
VOCABULARY = (
    "the a and to of in is for on with that this it be as at by from we are was will can not "
    "build test review change branch release merge deploy fix bug issue ticket owner agent "
    "lobby message queue delivery retry schedule checkpoint revision migration index table "
    "query search page inbox history room broadcast direct pending acknowledged held waiting "
    "green red failing passing flaky slow fast timeout error warning log trace profile cache "
    "session token auth login user account settings dashboard console bridge socket stream "
    "push notice frame server client request response status report summary plan task done "
    "started blocked ready next after before today tomorrow morning evening please thanks "
    "check look update write read delete rename move split join wrap parse render send ack "
    "database sqlite postgres redis worker thread loop lock commit rollback transaction "
    "benchmark figure ratio target measured budget cost usage limit bound capacity storage"
)
WORDS = VOCABULARY.split()
UNICODE_WORDS = ("Größe", "Übersicht", "café", "ÉTÉ", "naïve", "Ωmega")
QUERIES = (
    ("rare identifier", "session_4242.py"),
    ("rare ticket", "#31337"),
    ("medium word", "checkpoint"),
    ("common word", "review"),
    ("phrase", "the build is"),
    ("no match", "kubernetes"),
    ("unicode, other case", "ÜBERSICHT"),
    ("unicode, other case", "größe"),
)


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randrange(8, 30))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), f"api/session_{rng.randrange(10_000)}.py")
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), f"#{rng.randrange(100_000)}")
    if rng.random() < 0.02:
        words.insert(rng.randrange(len(words)), rng.choice(UNICODE_WORDS))
    if rng.random() < 0.05:
        words[0:0] = ["the", "build", "is", rng.choice(("green", "red", "slow"))]
    return " ".join(words).capitalize()


def finish(path: Path) -> None:
    """Merge the search index's segments, as a long-running store's automerge would."""
    db = sqlite3.connect(path)
    db.execute("INSERT INTO lobbies_message_search(lobbies_message_search) VALUES ('optimize')")
    db.execute("ANALYZE")
    db.commit()
    db.close()


def timed(call: Callable[[], Any]) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    call()
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-before", action="store_true", help="time the current code only")
    parser.add_argument("--store", help="data directory: reused if built before, else built there")
    args = parser.parse_args()
    started = time.perf_counter()
    data_dir = Path(args.store or tempfile.mkdtemp(prefix="pocolobby-search-"))
    if not (data_dir / "pocolobby.sqlite3").exists():
        build_store(data_dir, args.agents, args.messages, sentence)
        finish(data_dir / "pocolobby.sqlite3")
    print(
        f"store: {args.agents} agents, {args.messages:,} messages of the day with varied text, "
        f"ready in {time.perf_counter() - started:.0f} s ({data_dir}); page of {PAGE}"
    )

    django_on_store(data_dir)
    # local: models are usable only after django.setup()
    from django.db.models import Exists, OuterRef, Q
    from django.db.models.expressions import RawSQL

    from lobbies import selectors
    from lobbies.models import Agent, Delivery, Message

    agent = Agent.objects.get(pk=1)

    def previous(query: str, matcher: Callable[[str], Q]) -> dict[str, Any]:
        """history_page as it was: the search a filter on the ORM query, cut after sorting."""
        received = Delivery.objects.filter(message=OuterRef("pk"), recipient=agent).exclude(
            held_reason__in=selectors.NEVER_ARRIVED
        )
        messages = Message.objects.filter(
            Q(sender=agent) | Exists(received), lobby_id=agent.lobby_id
        ).filter(matcher(query))
        page = messages.order_by("-sequence")[: PAGE + 1]
        return selectors._page(agent, selectors._shown(page), PAGE, "history")

    def like(query: str) -> Q:  # before migration 0013: LIKE row by row
        return Q(content__icontains=query)

    def every_match(query: str) -> Q:  # 0013 as first merged: every index match, then the page
        phrase = '"' + query.replace('"', '""') + '"'
        found = RawSQL(
            "SELECT rowid FROM lobbies_message_search WHERE lobbies_message_search MATCH %s",
            [phrase],
        )
        return Q(pk__in=found)

    variants: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        ("LIKE", lambda q: previous(q, like)),
        ("FTS, all", lambda q: previous(q, every_match)),
        ("FTS, windows", lambda q: selectors.history_page(agent, q, PAGE, None)),
    ]
    if args.no_before:
        variants = variants[2:]
    timings: dict[str, list[float]] = {name: [] for name, _ in variants}
    cpu_timings: dict[str, list[float]] = {name: [] for name, _ in variants}
    print(
        "medians of wall time / cpu time in ms. LIKE = row by row (before 0013); FTS, all = "
        "every index match, then the page (0013); FTS, windows = matches newest first in "
        "windows sized from the hits so far (now)"
    )
    print(f"{'query':<34} {'hits':>5} " + " ".join(f"{name:>17}" for name, _ in variants))
    for label, query in QUERIES:
        page = selectors.history_page(agent, query, PAGE, None)
        hits = len(page["messages"])
        for name, call in variants[:-1]:
            if name != "LIKE" or not label.startswith("unicode"):
                assert call(query) == page, f"{query!r}: {name} gives another page"
        if label.startswith("unicode"):
            assert hits > 0, f"{query!r}: the index should fold case for all of Unicode"
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in variants}
        for _ in range(args.runs):  # alternate, so load from other work hits all alike
            for name, call in variants:
                runs[name].append(timed(lambda c=call, q=query: c(q)))  # type: ignore[misc]
        cells = []
        for name, _ in variants:
            timings[name] += [t[0] for t in runs[name]]
            cpu_timings[name] += [t[1] for t in runs[name]]
            wall, cpu = (statistics.median(t[i] for t in runs[name]) for i in (0, 1))
            cells.append(f"{wall:>8.1f} /{cpu:>7.1f}")
        print(f"{f'{label} {query!r}':<34} {hits:>5} " + " ".join(cells))
    for name, _ in variants:
        values = sorted(timings[name])
        p50, p90 = statistics.median(values), values[int(0.9 * len(values))]
        cpu = statistics.median(cpu_timings[name])
        print(
            f"{name:<13}: wall p50 {p50:6.1f} ms, p90 {p90:6.1f} ms; cpu p50 {cpu:6.1f} ms"
            f" over {len(values)} searches"
        )
    p50 = statistics.median(timings["FTS, windows"])
    cpu = statistics.median(cpu_timings["FTS, windows"])
    print(
        f"search p50 now: wall {p50:.1f} ms ({'met' if p50 <= TARGET_MS else 'NOT met'}), "
        f"cpu {cpu:.1f} ms ({'met' if cpu <= TARGET_MS else 'NOT met'}); target p50 <= "
        f"{TARGET_MS:.0f} ms"
    )
    if os.environ.get("SEARCH_PROFILE"):
        import cProfile  # local: only when profiling

        cProfile.runctx(
            "for _ in range(20): selectors.history_page(agent, 'review', PAGE, None)",
            globals(),
            locals(),
            sort="tottime",
        )


if __name__ == "__main__":
    main()
