"""The local operator's one-time tickets and sessions, held only in this process's memory.

Whoever can run `pocolobby settings` already holds the admin token, so a ticket grants
nothing new; a restart signs the operator out. Only hashes are kept.
"""

from __future__ import annotations

import threading
import time

from console.web import digest, new_secret

TICKET_SECONDS = 60
SESSION_SECONDS = 12 * 3600

_lock = threading.Lock()
_tickets: dict[str, float] = {}
_sessions: dict[str, float] = {}


def _prune(table: dict[str, float], now: float) -> None:
    for key in [k for k, expires in table.items() if expires <= now]:
        del table[key]


def issue_ticket() -> str:
    ticket, key = new_secret()
    with _lock:
        now = time.monotonic()
        _prune(_tickets, now)
        _tickets[key] = now + TICKET_SECONDS
    return ticket


def redeem_ticket(ticket: str) -> str | None:
    """Consume a live ticket and return a new operator session token, or None."""
    key = digest(ticket)
    with _lock:
        now = time.monotonic()
        _prune(_tickets, now)
        if _tickets.pop(key, None) is None:
            return None
        token, session_key = new_secret()
        _sessions[session_key] = now + SESSION_SECONDS
    return token


def operator_session_valid(token: str) -> bool:
    if not token:
        return False
    key = digest(token)
    with _lock:
        expires = _sessions.get(key)
        return expires is not None and expires > time.monotonic()


def end_operator_session(token: str) -> None:
    with _lock:
        _sessions.pop(digest(token), None)


def forget_all() -> None:
    """What a restart does; tests use it."""
    with _lock:
        _tickets.clear()
        _sessions.clear()
