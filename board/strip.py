"""The dashboard's history strip: 96 quarter-hour cells per agent, their message counts and
minutes of work, counted in the store and settled quarters kept per process."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db.models import (
    Count,
    DateTimeField,
    Func,
    IntegerField,
    Value,
)

from lobbies.models import Agent, Delivery, Lobby, Message, Scope

if TYPE_CHECKING:  # for the annotation only: board.refresh is imported at call (below)
    pass

CELL = timedelta(minutes=15)
CELLS = 96  # 24 hours of quarter hours


@dataclass(frozen=True)
class Cell:
    index: int
    count: int  # messages sent and direct messages received (the quieter mark)
    level: int  # 0..3, the colour class cell<level>: minutes of work
    starts_at: datetime
    work_seconds: int = 0  # of this quarter hour inside stretches of work

    @property
    def work_minutes(self) -> int:
        return (self.work_seconds + 59) // 60


def strip_window(now: datetime) -> tuple[datetime, datetime]:
    """The 24 hours the strip covers, ending at the end of the current quarter hour."""
    now = now.astimezone(UTC)
    end = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0) + CELL
    return end - CELLS * CELL, end


class QuarterHour(Func):
    """Which quarter hour since `start` a timestamp falls in, computed by the database.

    Native arithmetic on both backends (no per-row Python function), so grouping 100,000
    messages stays cheap on SQLite.
    """

    output_field = IntegerField()

    def __init__(self, expression: str, start: datetime) -> None:
        super().__init__(expression, Value(start, output_field=DateTimeField()))

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template="CAST((julianday(%(expressions)s)) * 96 AS INTEGER)",
            arg_joiner=") - julianday(",
            **extra,
        )

    def as_sql(  # PostgreSQL
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra: Any,
    ) -> Any:
        return super().as_sql(
            compiler,
            connection,
            function=function,
            template=template or "FLOOR(EXTRACT(EPOCH FROM (%(expressions)s)) / 900)::integer",
            arg_joiner=arg_joiner or " - ",
            **extra,
        )


# A quarter hour that ended this long ago can gain no message: sends and deliveries are
# stamped when they commit, and a commit takes well under this.
SETTLED_AFTER = timedelta(minutes=2)


class _SettledQuarters:
    """Counts of quarter hours that can no longer change, per lobby, in this process.

    Messages are immutable and a delivery's time is set once, so a settled quarter hour's
    counts stay true; each render then counts only the quarter hours still open (normally
    one or two) from the tables. A restart or another process simply counts again.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_lobby: dict[int, dict[datetime, dict[int, int]]] = {}

    def forget(self) -> None:
        with self.lock:
            self.by_lobby.clear()


SETTLED = _SettledQuarters()


def _count_quarters(lobby: Lobby, since: datetime, until: datetime) -> dict[int, dict[int, int]]:
    """{cell since `since`: {agent pk: messages it sent + direct messages it received}}.

    One grouped query: sends through (lobby, created_at), direct receipts through
    (recipient, delivered_at), each placed in the quarter hour it happened in.
    """
    sent = (
        Message.objects.filter(lobby=lobby, created_at__gte=since, created_at__lt=until)
        .exclude(sender_id=None)
        .annotate(cell=QuarterHour("created_at", since))
        .values_list("sender_id", "cell")
        .annotate(n=Count("id"))
        .order_by()
    )
    members = Agent.objects.filter(lobby=lobby).values("pk")
    received = (
        Delivery.objects.filter(
            recipient_id__in=members,
            delivered_at__gte=since,
            delivered_at__lt=until,
            message__scope=Scope.DIRECT,
        )
        .annotate(cell=QuarterHour("delivered_at", since))
        .values_list("recipient_id", "cell")
        .annotate(n=Count("id"))
        .order_by()
    )
    cells: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for agent_pk, cell, n in sent.union(received, all=True):
        cells[cell][agent_pk] += n
    return cells


def message_counts(lobby: Lobby, agent_pks: list[int], now: datetime) -> dict[int, list[int]]:
    """Messages each agent sent and direct messages it received, per quarter hour.

    Counted from the messages and deliveries tables at render time; only quarter hours not
    yet settled (or not yet counted by this process) are read.
    """
    start, end = strip_window(now)
    quarters = [start + n * CELL for n in range(CELLS)]
    settled_before = now - SETTLED_AFTER
    with SETTLED.lock:
        known = SETTLED.by_lobby.setdefault(lobby.pk, {})
        for quarter in [q for q in known if q < start]:
            del known[quarter]
        missing = [q for q in quarters if q not in known]
        remembered = {q: known[q] for q in quarters if q in known}
    if missing:
        since = missing[0]
        counted = _count_quarters(lobby, since, end)
        fresh = {
            since + cell * CELL: dict(by_agent)
            for cell, by_agent in counted.items()
            if 0 <= cell < CELLS
        }
        for quarter in missing:
            remembered[quarter] = fresh.get(quarter, {})
        with SETTLED.lock:
            known = SETTLED.by_lobby.setdefault(lobby.pk, {})
            for quarter in missing:
                if quarter + CELL <= settled_before:
                    known[quarter] = remembered[quarter]
    return {pk: [remembered[q].get(pk, 0) for q in quarters] for pk in agent_pks}


def work_level(seconds: float) -> int:
    """A quarter hour's colour by the work in it: 0 none, 1 under 5 min, 2 under 10, 3 more."""
    if seconds <= 0:
        return 0
    return 1 if seconds < 300 else 2 if seconds < 600 else 3


def strip_cells(counts: list[int], start: datetime, work: list[float] | None = None) -> list[Cell]:
    """Each quarter hour coloured by its minutes of work (stretches), with its message count."""
    work = work or [0.0] * len(counts)
    return [
        Cell(index, n, work_level(work[index]), start + index * CELL, int(work[index]))
        for index, n in enumerate(counts)
    ]
