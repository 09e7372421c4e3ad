"""WAL checkpoints on a thread of their own, off the commits of sends and pushes.

With SQLite's default (`wal_autocheckpoint` of 1,000 pages), the commit that passes the
mark copies the WAL back into the store and fsyncs it before it returns: every few seconds
of traffic one send or one broadcast's pushes waited for it, which was most of the broadcast
fan-out's p99 (docs/PERFORMANCE.md, "Figures from code comments"). `pocolobby serve` runs this
thread
instead: a PASSIVE checkpoint twice a second on its own connection, which waits for no
reader or writer and takes no GIL while SQLite works. The broker's connections keep an
automatic checkpoint only as a backstop far above what the thread leaves
(`BACKSTOP_PAGES`, pocolobby/settings.py), so the WAL stays bounded should this thread
fall behind.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("pocolobby.store")

CHECKPOINT_SECONDS = 0.5
# The connections' own automatic checkpoint, 10x SQLite's default (~40 MB of 4 KiB pages).
BACKSTOP_PAGES = 10_000


class WalCheckpointer:
    """A daemon thread checkpointing the store's WAL every `seconds` until stopped."""

    def __init__(self, path: Path, seconds: float = CHECKPOINT_SECONDS) -> None:
        self.path = path
        self.seconds = seconds
        self.stopping = threading.Event()
        self.checkpoints = 0  # completed PASSIVE checkpoints that copied frames
        self.thread = threading.Thread(target=self._run, name="wal-checkpoints", daemon=True)

    def start(self) -> WalCheckpointer:
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.thread.join(timeout)

    def checkpoint(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (busy, frames in the WAL, frames copied back)."""
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if copied > 0:
            self.checkpoints += 1
        return int(busy), int(frames), int(copied)

    def _run(self) -> None:
        try:
            # synchronous=FULL as the broker's own connections: the copy is fsynced.
            conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error:
            log.exception("WAL checkpoints: cannot open %s; commits checkpoint instead", self.path)
            return
        try:
            while not self.stopping.wait(self.seconds):
                try:
                    self.checkpoint(conn)
                except sqlite3.Error:
                    log.exception("a WAL checkpoint failed; trying again")
        finally:
            conn.close()
