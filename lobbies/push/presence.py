"""Presence: which broker processes are alive and which bridge sockets each one holds.

Each process registers itself, vouches for the sockets it heard from every beat, and its
rows go stale when it stops; readers count only connections of live processes.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from lobbies.models import Agent, BrokerProcess, Connection

# This process's identity in the presence registry.
PROCESS_ID = uuid.uuid4()
PROCESS_STALE_AFTER = timedelta(seconds=60)


def ensure_process() -> None:
    now = timezone.now()
    BrokerProcess.objects.update_or_create(
        id=PROCESS_ID,
        defaults={"last_seen_at": now},
        create_defaults={"started_at": now, "last_seen_at": now},
    )


def open_connection(agent_pk: int, generation: int) -> int:
    return open_connections([(agent_pk, generation)])[0]


def open_connections(sockets: list[tuple[int, int]]) -> list[int]:
    """Record sockets (agent, generation) of this process at once: one transaction, one fsync.

    The process's row must exist and look alive; a fresh one (the heartbeat keeps it so) is
    only read. A burst of reconnects after a restart paid an update of it and a commit per
    socket here, the largest piece of a reconnect storm (docs/PERFORMANCE.md, "Reconnect
    storm").
    """
    now = timezone.now()
    with transaction.atomic():
        if not BrokerProcess.objects.filter(
            id=PROCESS_ID, last_seen_at__gte=now - PROCESS_STALE_AFTER / 2
        ).exists():
            ensure_process()
        rows = Connection.objects.bulk_create(
            Connection(
                agent_id=agent_pk,
                process_id=PROCESS_ID,
                generation=generation,
                connected_at=now,
                last_heartbeat_at=now,
            )
            for agent_pk, generation in sockets
        )
    return [row.pk for row in rows]


def close_connection(connection_pk: int) -> None:
    Connection.objects.filter(pk=connection_pk).delete()


def heartbeat(connection_pks: list[int]) -> None:
    """This process is alive; these connections were heard from since the last beat."""
    now = timezone.now()
    with transaction.atomic():
        if not BrokerProcess.objects.filter(id=PROCESS_ID).update(last_seen_at=now):
            ensure_process()
        if connection_pks:
            Connection.objects.filter(pk__in=connection_pks).update(last_heartbeat_at=now)


def live_connections() -> QuerySet[Connection]:
    return Connection.objects.filter(
        process__last_seen_at__gte=timezone.now() - PROCESS_STALE_AFTER
    )


def register_process() -> None:
    """At start, before serving: this process joins the registry. A SQLite file is served by
    one process only, so any other registered process is a dead predecessor."""
    ensure_process()
    if connection.vendor == "sqlite":
        BrokerProcess.objects.exclude(id=PROCESS_ID).delete()


def forget_dead_processes(now: datetime) -> None:
    """Processes not heard from for a while are gone; their connections go with them."""
    stale = BrokerProcess.objects.filter(last_seen_at__lt=now - PROCESS_STALE_AFTER)
    if stale.exclude(id=PROCESS_ID).exists():
        stale.exclude(id=PROCESS_ID).delete()


# A new conversation refused with runtime_conflict asks again every few seconds while it
# waits for the owner's hand over. It counts as waiting once it asked again at least this
# long after its first ask (a health check such as `claude mcp list` asks once and exits),
# and stops counting when it has not asked for WAITING_FRESH.
WAITING_CONFIRMED = timedelta(seconds=2)
WAITING_FRESH = timedelta(seconds=30)


def waiting_runtime(agent: Agent, now: datetime) -> str | None:
    """The runtime of the new conversation waiting to take over the agent, if one still is."""
    return still_waiting(agent.waiting_runtime_id, agent.waiting_since, agent.waiting_seen_at, now)


def conversation_key(runtime_id: str) -> str:
    """A waiting conversation as a page names it: tells one runtime from another (so a Hand
    over acts on the conversation the owner saw) without putting the runtime id in the page."""
    return hashlib.sha256(runtime_id.encode()).hexdigest()[:16]


def still_waiting(
    runtime_id: str | None, since: datetime | None, seen: datetime | None, now: datetime
) -> str | None:
    """`waiting_runtime` on the columns themselves, for reads that fetch plain values."""
    if runtime_id is None or since is None or seen is None:
        return None
    if seen - since < WAITING_CONFIRMED or now - seen > WAITING_FRESH:
        return None
    return runtime_id
