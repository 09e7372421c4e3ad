"""The loops `pocolobby serve` runs beside the server: the dispatcher, presence, the
owner's alerts (Web Push and still-waiting mail, board/notifications/alerts.py) and the dashboard's
background work (notes checks and summaries, board/refresh.py).

The dispatcher runs the lobby timers (lobbies/push/timers.py) with the console's expiry sweep
composed in, in one process at a time (Leadership); presence vouches for this process's
sockets. Both start on the server's event loop once its sockets listen.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import close_old_connections, connection
from django.utils import timezone

from board import refresh
from board.notifications import alerts, waiting_mail
from board.notifications.senders import AlertSenders
from board.notifications.vapid import Vapid02, broker_vapid
from console.actions.expiry import sweep_expired
from lobbies.actions.restore import access_closed
from lobbies.api import http
from lobbies.fastlane import server
from lobbies.push import timers
from lobbies.push.consumers import LOCAL
from lobbies.push.events import DISPATCH_GROUP, SERVER_LOOP
from lobbies.push.presence import heartbeat
from lobbies.push.timers import Sweep, TickResult
from pocolobby import store_lock

log = logging.getLogger("pocolobby.dispatch")

# What the retention sweep removes besides the lobby store's expired rows.
SWEEPS: tuple[Sweep, ...] = (sweep_expired, alerts.sweep_settled_alerts)

TICK_SECONDS = 0.25
MIN_TICK_SPACING = 0.05
GROUP_REFRESH_SECONDS = 600
BEAT_SECONDS = 15
# Any 64-bit number of our own: PostgreSQL advisory lock naming "the dispatcher".
LEADER_LOCK_KEY = 0x506F4C62_00000001
# ... and the one naming "the owner's alerts": pushes and mail go out from one process.
# Not ...02, the store's lock (pocolobby/store_lock.py), which every broker holds shared: on
# that key no broker could ever lead the alerts.
ALERTS_LOCK_KEY = 0x506F4C62_00000003
ALERT_SECONDS = 2.0
# How often the dashboard loop looks for opened dashboards, and how many lobbies' notes
# fetches and summaries (network calls of seconds) run at once.
DASHBOARD_SECONDS = 1.0
DASHBOARD_WORKERS = 4
# How often a PostgreSQL broker checks that it still holds the store's lock.
LOCK_CHECK_SECONDS = 2.0


class Leadership:
    """Timers run in one process at a time: the holder of a PostgreSQL advisory lock.

    The lock lives on a dedicated connection, so it is released when the process dies and
    another process takes over at its next attempt. A follower keeps its connection and asks
    for the lock again on it, rather than reconnecting every attempt. SQLite serves one
    process: always leader.
    """

    def __init__(self, key: int = LEADER_LOCK_KEY) -> None:
        self.key = key
        self.connection: Any = None
        self.leading = False

    def _connect(self) -> Any:
        return store_lock.pg_connect(None)  # named as the process's others (PGAPPNAME)

    def hold(self) -> bool:
        if connection.vendor != "postgresql":
            return True
        try:
            if self.connection is None:
                self.connection = self._connect()
            if self.leading:
                self.connection.execute("SELECT 1")  # the lock lives as long as this session
                return True
            row = self.connection.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()
            self.leading = bool(row[0])
            if self.leading:
                log.info("this process holds lock %x (the dispatcher's or the alerts')", self.key)
            return self.leading
        except Exception:
            log.warning("lost the dispatcher lock's connection", exc_info=True)
            self.release()
            return False

    def release(self) -> None:
        self.leading = False
        if self.connection is not None:
            try:
                self.connection.close()
            except Exception:
                log.debug("closing the lock connection failed", exc_info=True)
            self.connection = None


def tick(now: datetime | None = None) -> TickResult:
    """One pass of the lobby timers, with the console's expiry sweep composed in."""
    return timers.tick(now, sweeps=SWEEPS)


def run_retention(now: datetime) -> None:
    """The retention sweep alone, lobby store and console together."""
    timers.run_retention(now, SWEEPS)


def _tick_and_close() -> TickResult:
    close_old_connections()
    return tick()


async def _listen_for_wakes(layer: BaseChannelLayer, channel: str, woken: asyncio.Event) -> None:
    """Turn commit wakes from any process into an in-process event.

    The receive is never cancelled (channel layers handle a cancelled receive poorly), and
    an error here only costs latency: the tick runs anyway.
    """
    joined_at = 0.0
    loop = asyncio.get_running_loop()
    while True:
        try:
            if loop.time() - joined_at > GROUP_REFRESH_SECONDS:
                await layer.group_add(DISPATCH_GROUP, channel)
                joined_at = loop.time()
            await layer.receive(channel)
            woken.set()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the dispatcher's wake channel failed; ticking on", exc_info=True)
            await asyncio.sleep(1)


async def run_dispatcher() -> None:
    """Tick every 250 ms, or sooner when a commit wakes us through the channel layer.

    Ticks run on their own thread, not the one Django's sync views share, and at most one
    per 50 ms however many commits wake it: a burst of sends costs one pass, not one each.
    The loop outlives any error: while it holds the timers' lock no other process runs them.
    """
    layer = get_channel_layer()
    channel = await layer.new_channel()
    woken = asyncio.Event()
    listener = asyncio.ensure_future(_listen_for_wakes(layer, channel, woken))
    leadership = Leadership()
    hold = database_sync_to_async(leadership.hold, thread_sensitive=False)
    run = database_sync_to_async(_tick_and_close, thread_sensitive=False)
    loop = asyncio.get_running_loop()
    try:
        while True:
            started = loop.time()
            woken.clear()
            try:
                if await hold():
                    result = await run()
                    for group, message in result.publish:
                        await layer.group_send(group, message)
                else:
                    await asyncio.sleep(2)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatcher tick failed; retrying")
                await asyncio.sleep(1)
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout=TICK_SECONDS)
            await asyncio.sleep(max(0.0, started + MIN_TICK_SPACING - loop.time()))
    finally:
        listener.cancel()
        leadership.release()


async def run_presence() -> None:
    """Vouch for this process's sockets every 15 s, with the ones heard from since."""
    while True:
        await asyncio.sleep(BEAT_SECONDS)
        heard = []
        for consumer in list(LOCAL):
            if consumer.heard_since_beat and consumer.connection_pk is not None:
                heard.append(consumer.connection_pk)
                consumer.heard_since_beat = False
        if not LOCAL:
            continue
        try:
            await database_sync_to_async(heartbeat)(heard)
        except Exception:
            log.exception("presence heartbeat failed")


@dataclass
class AlertWork:
    """One alerts pass: what the database step found to send."""

    pushes: list[alerts.Push] = field(default_factory=list)
    mails: list[waiting_mail.WaitingMail] = field(default_factory=list)
    vapid: Vapid02 | None = None


def _find_alert_work(with_mail: bool) -> AlertWork:
    """The pushes to send (marked taken), and the mails due when none are still going out
    (mail is marked only once sent, so a pass must not find the same again meanwhile)."""
    close_old_connections()
    if access_closed():  # restore mode: nothing goes out until the operator finishes it
        return AlertWork()
    alerts.watch_lobbies()
    work = AlertWork(alerts.take_pushes(), waiting_mail.due_mail() if with_mail else [])
    if work.pushes:
        work.vapid = broker_vapid()
    return work


def _record_alert_work(sent: list[alerts.Sent], mailed: list[int]) -> None:
    alerts.record_sends(sent)
    waiting_mail.record_mailed(mailed)


async def run_alerts() -> None:
    """Every two seconds, in one process at a time: the owner's pushes and mail.

    The database steps run where all database work runs (on SQLite, its one thread); the
    pushes go out on a pool of their own, one worker per lobby at a time, and mail on a
    thread of its own (board/notifications/senders.py): a slow push or mail service
    never holds up requests, sockets, the dispatcher's timers, another lobby's pushes or
    the mail. The pass never waits for a send; it records what finished since the last.
    Its own lock, apart from the dispatcher's.
    """
    leadership = Leadership(ALERTS_LOCK_KEY)
    hold = database_sync_to_async(leadership.hold, thread_sensitive=False)
    find = database_sync_to_async(_find_alert_work, thread_sensitive=False)
    record = database_sync_to_async(_record_alert_work, thread_sensitive=False)
    senders = AlertSenders()
    try:
        while True:
            try:
                sent, mailed = senders.finished()
                if sent or mailed:
                    await record(sent, mailed)
                if await hold():
                    work = await find(senders.mail_free)
                    senders.submit(work.pushes, work.vapid, work.mails)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the owner's alerts pass failed; retrying")
            await asyncio.sleep(ALERT_SECONDS)
    finally:
        leadership.release()
        senders.shutdown()


def _refresh_and_close(lobby_id: int) -> refresh.RefreshOutcome:
    close_old_connections()
    try:
        return refresh.run_refresh(lobby_id)
    finally:
        refresh.finished(lobby_id)
        connection.close()


def start_dashboard_work(
    workers: concurrent.futures.Executor,
) -> list[concurrent.futures.Future[refresh.RefreshOutcome]]:
    """One pass of the dashboard loop: start the work of each lobby whose dashboard was
    opened on any broker and whose work this process claims (board/refresh.py's rules: one
    start per lobby every 30 s across brokers, one run at a time per lobby here), each on
    a worker. Reads the store, and writes only a claim."""
    started = []
    for lobby_id in refresh.take_due(timezone.now()):
        try:
            started.append(workers.submit(_refresh_and_close, lobby_id))
        except BaseException:
            refresh.finished(lobby_id)
            raise
    return started


async def run_dashboard_work() -> None:
    """Every second: the notes checks and summaries the opened dashboards asked for.

    In every process (no leadership lock): openings are noted in the store, and whichever
    broker claims a lobby's start runs its work (a summary is claimed in the store again,
    board/summaries/attempts.py). The work runs on threads of its own, so a slow GitHub or Anthropic
    never holds up requests or the other loops.
    """
    workers = concurrent.futures.ThreadPoolExecutor(
        DASHBOARD_WORKERS, thread_name_prefix="dashboard"
    )
    start = database_sync_to_async(start_dashboard_work, thread_sensitive=False)
    try:
        while True:
            try:
                await start(workers)
            except Exception:
                log.exception("the dashboard's background work could not start; retrying")
            await asyncio.sleep(DASHBOARD_SECONDS)
    finally:
        workers.shutdown(wait=False)


async def run_store_lock_watch() -> None:
    """On PostgreSQL, every few seconds: the store's lock still held (store_lock.keep_held);
    when it cannot be held again the broker shuts down, and `serve` exits 1 saying why."""
    loop = asyncio.get_running_loop()
    lost = asyncio.Event()
    store_lock.ON_LOST.append(lambda: loop.call_soon_threadsafe(lost.set))
    http.WRITE_CHECKS.append(store_lock.write_refusal)
    while True:
        # Every few seconds, or at once when a write found the lock's session lost.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lost.wait(), LOCK_CHECK_SECONDS)
        lost.clear()
        try:
            reason = await loop.run_in_executor(None, store_lock.keep_held)
        except Exception:
            log.exception("checking the store's lock failed; checking again")
            continue
        if reason is not None:
            log.error("%s; this broker stops serving", reason)
            server.stop()
            return


def start_loops() -> list[asyncio.Task[None]]:
    """Called by `pocolobby serve` on the server's event loop once its sockets listen."""
    SERVER_LOOP["loop"] = asyncio.get_running_loop()
    return [
        asyncio.ensure_future(run_dispatcher()),
        asyncio.ensure_future(run_presence()),
        asyncio.ensure_future(run_alerts()),
        asyncio.ensure_future(run_dashboard_work()),
        *([asyncio.ensure_future(run_store_lock_watch())] if store_lock.HELD_POSTGRES else []),
    ]
