"""What questions to the owner cost the dashboard (issue 41): the busy lobby of
benchmarks/dashboard_render.py (50 agents, 100,000 messages in 24 hours), rendered before and
after 2,000 questions to `owner` are added (half of them answered by the owner's reply naming
them), through Django's test client as the local operator. Prints the medians and their
ratios, measured in one run, and each against the dashboard's 100 ms bar.

    .venv/bin/python benchmarks/owner_questions.py [--messages N] [--questions N] [--runs N]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_render import BAR_MS, build_store  # sibling scripts, not a package
from harness import django_on_store, operator_client, stamp, timed_get

AGENTS = 50


def add_questions(data_dir: Path, questions: int, first_id: int) -> None:
    """The lobby's `owner` row, `questions` messages to it of kind question from the agents,
    and the owner's reply (reply_to) to every other one."""
    db = sqlite3.connect(data_dir / "pocolobby.sqlite3")
    now = datetime.now(UTC).replace(tzinfo=None)

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

    django_on_store(data_dir)
    client = operator_client()
    from django.db import connection  # local: after django.setup()

    paths = {"whole dashboard": "/bench/", "waiting part": "/bench/parts/waiting"}

    def median_ms(path: str) -> float:
        return statistics.median(timed_get(client, path, args.runs)[0])

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
