"""Sweeping what has expired: sign-in codes, counted throttle events, sessions, hand-offs.

Each is already refused once past its time; this only keeps the tables small. Reads first,
so an idle broker's sweep writes nothing.
"""

from __future__ import annotations

from datetime import datetime

from console.actions.sign_in import HOUR
from console.models import Handoff, SignInCode, SignInThrottle, WebSession


def sweep_expired(now: datetime) -> dict[str, int]:
    removed = {}
    for name, expired in (
        ("sign_in_codes", SignInCode.objects.filter(expires_at__lte=now)),
        # An hour is the longest window a throttle counts over.
        ("throttle_events", SignInThrottle.objects.filter(at__lte=now - HOUR)),
        ("web_sessions", WebSession.objects.filter(expires_at__lte=now)),
        ("handoffs", Handoff.objects.filter(expires_at__lte=now)),
    ):
        removed[name] = expired.delete()[0] if expired.exists() else 0
    return removed
