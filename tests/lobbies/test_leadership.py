"""The dispatcher's timers run in one process: the holder of a PostgreSQL advisory lock."""

from __future__ import annotations

import pytest
from django.db import connection

from pocolobby.loops import Leadership
from tests.eventually import eventually

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the lock is PostgreSQL's; SQLite is one process"
)


def test_a_follower_asks_again_on_its_own_connection_and_takes_over_when_freed():
    leader, follower = Leadership(), Leadership()
    try:
        assert leader.hold() is True
        assert follower.hold() is False
        waiting_on = follower.connection
        assert waiting_on is not None and not waiting_on.closed
        assert follower.hold() is False
        assert follower.connection is waiting_on  # no reconnect per attempt
        assert leader.hold() is True  # the holder keeps it

        leader.release()  # as when the leader's process dies with its session
        # The server frees the lock when the closed session's backend exits, a moment after
        # the client closed it; a follower asks at each attempt, as the loop does.
        eventually(follower.hold, timeout=10, every=0.05, what="the follower taking the lock")
        assert follower.leading is True
        assert follower.connection is waiting_on
    finally:
        leader.release()
        follower.release()
