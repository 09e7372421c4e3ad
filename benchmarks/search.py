"""History search over a day of 100,000 messages, on the embedded default (SQLite FTS5).

Builds a real store (`pocolobby init`, then rows written directly: 10 agents, 100,000 messages
of the last 24 hours, 80% direct with a delivery each, the rest broadcasts) whose messages
carry varied text: sentences from a vocabulary of ~150 words, file names and ticket numbers
that repeat rarely, and a few non-ASCII words. The search index is kept by the migration's
triggers, as a send keeps it. Then times, in-process, `get_messages` history searches by one
agent (its history: ~18,000 of the day's messages), a page of 200, for queries of several
kinds: a rare identifier, a medium and a common word, a phrase, a query that matches nothing,
and a Unicode query in another case than the text. Each query is timed against the previous
implementation too (a row-by-row case-insensitive `LIKE`, the code before migration 0013) in
alternation, after checking both return the same messages (the Unicode query excepted: `LIKE`
folds ASCII only). Prints medians per query and the p50 over every timed search.
Target: p50 <= 20 ms.

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
from dashboard_render import build_store  # a sibling script, not a package

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
    ("unicode, other case", "GRÖSSE"),
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


def fill_text(path: Path, count: int) -> None:
    """Give every message varied text; the FTS5 update trigger re-indexes each row."""
    rng = random.Random(18)
    db = sqlite3.connect(path)
    rows = []
    for n in range(1, count + 1):
        text = sentence(rng)
        rows.append((text, len(text.encode()), n))
    db.executemany("UPDATE lobbies_message SET content = ?, content_bytes = ? WHERE id = ?", rows)
    db.execute(
        "UPDATE lobbies_delivery SET content_bytes = (SELECT content_bytes FROM"
        " lobbies_message m WHERE m.id = message_id)"
    )
    db.commit()
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
    parser.add_argument("--no-before", action="store_true", help="skip the LIKE comparison")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="pocolobby-search-"))
    started = time.perf_counter()
    build_store(data_dir, args.agents, args.messages)
    fill_text(data_dir / "pocolobby.sqlite3", args.messages)
    print(
        f"store: {args.agents} agents, {args.messages:,} messages of the day with varied text, "
        f"built in {time.perf_counter() - started:.0f} s; page of {PAGE}"
    )

    for name in [k for k in os.environ if k.startswith("POCOLOBBY_")]:
        os.environ.pop(name)
    os.environ["POCOLOBBY_DATA_DIR"] = str(data_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "pocolobby.settings"
    # local: the data directory and settings module are chosen above, before Django loads
    import django

    django.setup()
    # local: models are usable only after django.setup()
    from django.db.models import Q

    from lobbies import selectors
    from lobbies.models import Agent

    agent = Agent.objects.get(pk=1)
    indexed = selectors._matching

    def like(query: str) -> Q:  # the code before migration 0013: LIKE row by row
        return Q(content__icontains=query)

    def search(query: str, matcher: Callable[[str], Q]) -> dict[str, Any]:
        selectors._matching = matcher  # type: ignore[assignment]
        try:
            return selectors.history_page(agent, query, PAGE, None)
        finally:
            selectors._matching = indexed  # type: ignore[assignment]

    every_after: list[float] = []
    every_before: list[float] = []
    print("medians of wall time (cpu time) in ms; before = LIKE row by row, after = FTS5 trigram")
    print(f"{'query':<32} {'hits':>5} {'before':>16} {'after':>16} {'ratio':>6}")
    for label, query in QUERIES:
        page = search(query, indexed)
        hits = len(page["messages"])
        if not args.no_before and not label.startswith("unicode"):
            assert page == search(query, like), f"{query!r}: the pages differ"
        if label.startswith("unicode"):
            assert hits > 0, f"{query!r}: the index should fold case for all of Unicode"
        after: list[tuple[float, float]] = []
        before: list[tuple[float, float]] = []
        for _ in range(args.runs):  # alternate, so load from other work hits both alike
            after.append(timed(lambda q=query: search(q, indexed)))
            if not args.no_before:
                before.append(timed(lambda q=query: search(q, like)))
        every_after += [t[0] for t in after]
        every_before += [t[0] for t in before]
        a_wall, a_cpu = (statistics.median(t[i] for t in after) for i in (0, 1))
        shown = f"{label} {query!r}"
        if before:
            b_wall, b_cpu = (statistics.median(t[i] for t in before) for i in (0, 1))
            print(
                f"{shown:<32} {hits:>5} {b_wall:>7.1f} ({b_cpu:>6.1f})"
                f" {a_wall:>7.1f} ({a_cpu:>6.1f}) {b_wall / a_wall:>5.1f}x"
            )
        else:
            print(f"{shown:<32} {hits:>5} {'-':>16} {a_wall:>7.1f} ({a_cpu:>6.1f})")
    p50 = statistics.median(every_after)
    p90 = sorted(every_after)[int(0.9 * len(every_after))]
    verdict = "met" if p50 <= TARGET_MS else "NOT met"
    print(
        f"search p50 over all {len(every_after)} timed searches: {p50:.1f} ms (p90 {p90:.1f} ms);"
        f" target p50 <= {TARGET_MS:.0f} ms: {verdict}"
    )
    if every_before:
        print(f"before (LIKE) p50 over the same searches: {statistics.median(every_before):.1f} ms")
    if os.environ.get("SEARCH_PROFILE"):
        import cProfile  # local: only when profiling

        cProfile.runctx(
            "for _ in range(20): search('review', indexed)", globals(), locals(), sort="tottime"
        )


if __name__ == "__main__":
    main()
