"""Sweeping what has expired: sign-in codes, counted throttle events, sessions, hand-offs.

Each is already refused once past its time; this only keeps the tables small. Reads first,
so an idle broker's sweep writes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from console.models import Handoff, SignInCode, SignInThrottle, WebSession

# The longest window a throttle counts over (an hour); older events count for nothing.
THROTTLE_KEPT_FOR = timedelta(hours=1)


def sweep_expired(now: datetime) -> dict[str, int]:
    removed = {}
    for name, expired in (
        ("sign_in_codes", SignInCode.objects.filter(expires_at__lte=now)),
        ("throttle_events", SignInThrottle.objects.filter(at__lte=now - THROTTLE_KEPT_FOR)),
        ("web_sessions", WebSession.objects.filter(expires_at__lte=now)),
        ("handoffs", Handoff.objects.filter(expires_at__lte=now)),
    ):
        removed[name] = expired.delete()[0] if expired.exists() else 0
    return removed
