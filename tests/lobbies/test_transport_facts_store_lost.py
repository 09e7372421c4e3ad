"""Transport facts a bridge reported survive a lost database connection: written once more
on a fresh connection, and if the store still fails they wait for the next flush and the
heartbeat (whose answer means "all you reported is recorded") is not answered. The chaos
soak on PostgreSQL found facts confirmed but not recorded when every session was cut."""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError

from lobbies.push import consumers, frames


def test_facts_are_written_again_on_a_fresh_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[list[frames.TransportFact]] = []

    def record(batch: list[frames.TransportFact]) -> None:
        if not written:
            written.append([])
            raise OperationalError("terminating connection due to administrator command")
        written.append(batch)

    closed: list[bool] = []
    monkeypatch.setattr(frames, "record_transport_facts", record)
    monkeypatch.setattr(consumers.connection, "close", lambda: closed.append(True))
    fact = (1, 1, "00000000-0000-0000-0000-000000000001", "host_written")
    consumers._record_facts([fact])
    assert written == [[], [fact]] and closed == [True]


def test_facts_the_store_would_not_take_wait_for_the_next_flush(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def lost(batch: list[frames.TransportFact]) -> None:
        raise OperationalError("the connection is closed")

    async def flush_on_this_thread(fn, *args):  # type: ignore[no-untyped-def]
        return fn(*args)

    monkeypatch.setattr(consumers, "_record_facts", lost)
    monkeypatch.setattr(consumers, "on_worker", lambda fn: lambda *a: flush_on_this_thread(fn, *a))
    queue = consumers.FactQueue()
    fact = (1, 1, "00000000-0000-0000-0000-000000000001", "received")
    queue.pending.append(fact)
    assert asyncio.run(queue.flush()) is False
    assert queue.pending == [fact]
