"""What questions to the owner cost the dashboard (issue 41): the busy lobby of
benchmarks/dashboard_render.py (50 agents, 100,000 messages in 24 hours), rendered before and
after 2,000 questions to `owner` are added (half of them answered by the owner's reply naming
them), through Django's test client as the local operator. Prints the medians and their
ratios, measured in one run, and each against the dashboard's 100 ms bar.

    .venv/bin/python benchmarks/owner_questions.py [--messages N] [--questions N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_render import BAR_MS, build_store

AGENTS = 50


def add_questions(data_dir: Path, questions: int, first_id: int) -> None:
    """The lobby's `owner` row, `questions` messages to it of kind question from the agents,
    and the owner's reply (reply_to) to every other one."""
    db = sqlite3.connect(data_dir / "pocolobby.sqlite3")
    now = datetime.now(UTC).replace(tzinfo=None)

    def stamp(moment: datetime) -> str:
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")

    owner = db.execute(
        "INSERT INTO lobbies_agent (lobby_id, agent_id, description, role, enabled, manage_rooms,"
        " broadcast, status_line, owner_request_count, owner_request_line, receipt_sequence,"
        " runtime_generation, backlog_sequence, bootstrap_nonce, bootstrap_attempts,"
        " notify_attempts, notification_attention_required, resting, created_at) VALUES"
        " (1, 'owner', '', '', 0, 0, 1, '', 0, '', 0, 0, 0, '', 0, 0, 0, 0, ?)",
        (stamp(now),),
    ).lastrowid
    messages, deliveries = [], []
    next_id = first_id
    for n in range(questions):
        sender = n % AGENTS + 1
        asked = now - timedelta(seconds=80_000 - n * 30)
        question = next_id
        messages.append(
            (
                question,
                question,
                sender,
                f"agent-{sender - 1:02d}",
                "question",
                1,
                None,
                f"q-{n}",
                stamp(asked),
            )
        )
        deliveries.append((question, owner, "pending", stamp(asked), None))
        next_id += 1
        if n % 2 == 0:
            answered = asked + timedelta(seconds=10)
            messages.append(
                (next_id, next_id, owner, "owner", None, 0, question, f"a-{n}", stamp(answered))
            )
            deliveries.append((next_id, sender, "seen", stamp(answered), stamp(answered)))
            next_id += 1
    db.executemany(
        "INSERT INTO lobbies_message (id, lobby_id, sequence, sender_id, sender_name, scope, kind,"
        " reply_expected, reply_to, priority, content, content_bytes, fields, correlation_id,"
        " client_request_id, notify_when_seen, request_hash, room_name, addressed_to,"
        " scheduled_pending, late, created_at) VALUES"
        " (?, 1, ?, ?, ?, 'direct', ?, ?, ?, 'info', 'x', 1, '{}', '', ?, 0, '', '', '[]', 0, 0,"
        " ?)",
        messages,
    )
    db.executemany(
        "INSERT INTO lobbies_delivery (message_id, recipient_id, state, content_bytes,"
        " delivered_at, agent_seen_at, redacted) VALUES (?, ?, ?, 1, ?, ?, 0)",
        deliveries,
    )
    db.execute("UPDATE lobbies_lobby SET message_sequence = ?", (next_id - 1,))
    db.execute("ANALYZE")
    db.commit()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="pocolobby-questions-"))
    build_store(data_dir, AGENTS, args.messages)

    for name in [k for k in os.environ if k.startswith("POCOLOBBY_")]:
        os.environ.pop(name)
    os.environ["POCOLOBBY_DATA_DIR"] = str(data_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "pocolobby.settings"
    # local: the data directory and settings module are chosen above, before Django loads
    import django

    django.setup()
    # local: models and settings are usable only after django.setup()
    from django.db import connection
    from django.test import Client

    from console import local

    client = Client(HTTP_HOST="127.0.0.1:8787")
    client.cookies["__Host-pocolobby-operator"] = local.redeem_ticket(local.issue_ticket()) or ""
    paths = {"whole dashboard": "/bench/", "waiting part": "/bench/parts/waiting"}

    def median_ms(path: str) -> float:
        times = []
        for run in range(args.runs + 2):
            t = time.perf_counter()
            response = client.get(path)
            elapsed = (time.perf_counter() - t) * 1000
            assert response.status_code == 200, response.content[:300]
            if run >= 2:  # the first two warm caches and templates
                times.append(elapsed)
        return statistics.median(times)

    before = {label: median_ms(path) for label, path in paths.items()}
    connection.close()
    add_questions(data_dir, args.questions, args.messages + 1)
    after = {label: median_ms(path) for label, path in paths.items()}
    waiting = client.get(paths["waiting part"]).content.decode()
    assert f'data-more-questions="{args.questions // 2 - 20}"' in waiting, "questions not counted"
    print(
        f"{args.messages:,} messages, {AGENTS} agents; then {args.questions:,} questions to the "
        f"owner, {args.questions // 2:,} answered"
    )
    for label in paths:
        print(
            f"{label}: {before[label]:.1f} ms without questions, {after[label]:.1f} ms with them"
            f" (ratio {after[label] / before[label]:.2f}; {after[label] / BAR_MS:.2f} of the "
            f"{BAR_MS:.0f} ms bar)"
        )


if __name__ == "__main__":
    main()
