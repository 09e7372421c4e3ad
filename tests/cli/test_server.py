"""The server `pocolobby serve` runs (pocolobby/server.py): where its database work runs."""

from __future__ import annotations

import asyncio
import threading
import time

from asgiref.sync import sync_to_async
from django.db import connection

from pocolobby.server import confine_sqlite_to_one_thread


def _thread_after_a_while() -> int:
    time.sleep(0.02)  # long enough that a pool would hand the next call to another thread
    return threading.get_ident()


async def _threads_used(confine: bool) -> set[int]:
    if confine:
        confine_sqlite_to_one_thread()
    calls = [sync_to_async(_thread_after_a_while, thread_sensitive=False)() for _ in range(6)]
    return set(await asyncio.gather(*calls))


def test_on_sqlite_all_database_work_off_the_loop_shares_one_thread_and_connection():
    threads = asyncio.run(_threads_used(confine=True))
    if connection.vendor == "sqlite":
        assert len(threads) == 1
    else:
        assert len(threads) > 1  # PostgreSQL keeps the pool


def test_without_it_the_same_calls_spread_over_a_pool():
    assert len(asyncio.run(_threads_used(confine=False))) > 1
