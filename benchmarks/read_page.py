"""Broker time to read an inbox or history page of 200 messages on the embedded default.

Builds a store (10 agents, 4,000 messages of the day, 80% direct with a delivery each; every
copy to agent-00 left pending, so its inbox holds ~320 messages and its history ~720), then
times, in-process against that same store, the selectors `get_messages` calls: the previous
implementation (kept below as `before_*`, the ORM with a prefetch and model instances) and
the current one (`lobbies.selectors`). Checks both give the same answer, prints medians and
the ratio. Target: a page of 200 in <= 10 ms.

    .venv/bin/python benchmarks/read_page.py [--messages 4000] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_render import build_store  # sibling scripts, not a package
from harness import django_on_store

TARGET_MS = 10.0
PAGE = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--messages", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="pocolobby-reads-"))
    build_store(data_dir, args.agents, args.messages)
    db = sqlite3.connect(data_dir / "pocolobby.sqlite3")
    db.execute(
        "UPDATE lobbies_message SET content = 'status report ' || id || ' about item ' || "
        "(id % 97) || ': the build is green and the review is waiting on the owner', "
        "fields = '{\"item\": 1}'"
    )
    db.execute(
        "UPDATE lobbies_delivery SET state = 'pending', agent_seen_at = NULL WHERE recipient_id = 1"
    )
    db.commit()
    db.close()

    django_on_store(data_dir)
    from lobbies import selectors
    from lobbies.models import Agent

    agent = Agent.objects.get(pk=1)
    before = _before(selectors)
    second = str(before.history_page(agent, None, PAGE, None)["next_cursor"])
    cases = [
        (
            "inbox",
            lambda: before.inbox_page(agent, PAGE, None),
            lambda: selectors.inbox_page(agent, PAGE, None),
        ),
        (
            "history",
            lambda: before.history_page(agent, None, PAGE, None),
            lambda: selectors.history_page(agent, None, PAGE, None),
        ),
        (
            "history, 2nd page",
            lambda: before.history_page(agent, None, PAGE, second),
            lambda: selectors.history_page(agent, None, PAGE, second),
        ),
        # Search: before is the row-by-row LIKE, after the FTS5 trigram index (0013).
        (
            "search, full page",
            lambda: before.history_page(agent, "STATUS REPORT", PAGE, None),
            lambda: selectors.history_page(agent, "STATUS REPORT", PAGE, None),
        ),
        (
            "search, few hits",
            lambda: before.history_page(agent, "ABOUT ITEM 42:", PAGE, None),
            lambda: selectors.history_page(agent, "ABOUT ITEM 42:", PAGE, None),
        ),
    ]
    print(f"store: {args.agents} agents, {args.messages:,} messages; page of {PAGE}")
    print("medians; wall = elapsed, cpu = this process's CPU time (less noisy under load)")
    print(
        f"{'page':<18} {'before wall':>11} {'after wall':>10} {'ratio':>6}"
        f" {'before cpu':>10} {'after cpu':>9} {'ratio':>6}  target <= {TARGET_MS} ms"
    )
    for label, old, new in cases:
        assert old() == new(), f"{label}: the pages differ"
        assert len(new()["messages"]) == PAGE or label.startswith("search"), label
        old_ms: list[tuple[float, float]] = []
        new_ms: list[tuple[float, float]] = []
        for _ in range(args.runs):  # alternate, so load from other work hits both alike
            old_ms.append(_timed(old))
            new_ms.append(_timed(new))
        a, b = (statistics.median(t[0] for t in old_ms), statistics.median(t[0] for t in new_ms))
        c, d = (statistics.median(t[1] for t in old_ms), statistics.median(t[1] for t in new_ms))
        met = "met" if b <= TARGET_MS else "NOT met"
        print(
            f"{label:<18} {a:>11.2f} {b:>10.2f} {a / b:>5.1f}x"
            f" {c:>10.2f} {d:>9.2f} {c / d:>5.1f}x  wall {met}"
        )
    if os.environ.get("READ_PAGE_PROFILE"):
        import cProfile

        cProfile.runctx("for _ in range(20): cases[1][2]()", globals(), locals(), sort="tottime")


def _timed(call: Any) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    call()
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


def _before(selectors: Any) -> Any:
    """The selectors as they were before this benchmark's change (ORM, prefetch, instances)."""
    from types import SimpleNamespace

    from django.db.models import Exists, OuterRef, Prefetch, Q

    from lobbies.models import Delivery, DeliveryState, Message, Scope
    from lobbies.names import OWNER_SENDER
    from lobbies.wire.cursors import encode_cursor
    from lobbies.wire.facts import addressing_facts, delivery_facts, iso

    def message_for(viewer: Any, message: Any, deliveries: list[Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "message_id": message.pk,
            "sequence": message.sequence,
            "from": message.sender_name,
            "scope": message.scope,
            "kind": message.kind,
            "reply_expected": message.reply_expected,
            "priority": message.priority,
            "content": message.content,
            "fields": message.fields,
            "reply_to": message.reply_to,
            "correlation_id": message.correlation_id or None,
            "created_at": iso(message.created_at),
        }
        if message.sender_name == OWNER_SENDER:
            body["from_owner"] = True
        body.update(addressing_facts(message))
        if message.scope == Scope.DIRECT and deliveries:
            body["to"] = deliveries[0].recipient.agent_id
        elif message.scope != Scope.DIRECT:
            body["to"] = "*"
        if message.sender_id == viewer.pk:
            body["client_request_id"] = message.client_request_id
            body["recipients"] = [
                {"agent_id": d.recipient.agent_id, **delivery_facts(d)} for d in deliveries
            ]
        mine = next((d for d in deliveries if d.recipient_id == viewer.pk), None)
        if mine is not None:
            body["delivery"] = delivery_facts(mine)
            if mine.redacted and message.sender_id != viewer.pk:
                body["content"], body["fields"], body["redacted"] = None, {}, True
        return body

    def with_deliveries(messages: Any) -> Any:
        return messages.prefetch_related(
            Prefetch(
                "deliveries",
                queryset=Delivery.objects.select_related("recipient").order_by(
                    "recipient__agent_id"
                ),
            )
        )

    def page(agent: Any, rows: list[Any], limit: int, view: str) -> dict[str, Any]:
        more = len(rows) > limit
        rows = rows[:limit]
        return {
            "view": view,
            "messages": [message_for(agent, m, list(m.deliveries.all())) for m in rows],
            "next_cursor": encode_cursor(view, rows[-1].sequence) if more else None,
        }

    def inbox_page(agent: Any, limit: int, cursor: str | None) -> dict[str, Any]:
        after = selectors.decode_cursor("inbox", cursor) if cursor else 0
        messages = with_deliveries(
            Message.objects.filter(
                deliveries__recipient=agent,
                deliveries__state=DeliveryState.PENDING,
                sequence__gt=after,
            ).order_by("sequence")
        )[: limit + 1]
        return page(agent, list(messages), limit, "inbox")

    def history_page(agent: Any, query: str | None, limit: int, cursor: str | None) -> Any:
        received = Delivery.objects.filter(message=OuterRef("pk"), recipient=agent).exclude(
            held_reason__in=selectors.NEVER_ARRIVED
        )
        messages = Message.objects.filter(
            Q(sender=agent) | Exists(received), lobby_id=agent.lobby_id
        )
        if cursor:
            messages = messages.filter(sequence__lt=selectors.decode_cursor("history", cursor))
        if query:
            messages = messages.filter(content__icontains=query)
        rows = with_deliveries(messages.order_by("-sequence"))[: limit + 1]
        return page(agent, list(rows), limit, "history")

    return SimpleNamespace(inbox_page=inbox_page, history_page=history_page)


if __name__ == "__main__":
    main()
