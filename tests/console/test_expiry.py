"""The minute sweep removes expired sign-in codes, old throttle events, sessions and
hand-offs, and nothing live; idle, it only reads."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.actions.expiry import sweep_expired
from console.models import (
    Account,
    Handoff,
    SessionPlace,
    SignInCode,
    SignInThrottle,
    ThrottleKind,
    WebSession,
)
from lobbies.push import timers
from pocolobby import loops

pytestmark = pytest.mark.django_db


def _rows(now, account, lobby, *, expired: bool) -> None:
    at = now - timedelta(seconds=1) if expired else now + timedelta(minutes=5)
    tag = "old" if expired else "live"
    SignInCode.objects.create(
        address_mac=f"{tag}-address", code_mac="c", expires_at=at, created_at=now
    )
    SignInThrottle.objects.create(
        kind=ThrottleKind.CODE_SENT,
        key=tag,
        at=now - timedelta(hours=1, seconds=1) if expired else now - timedelta(minutes=59),
    )
    WebSession.objects.create(
        token_hash=f"{tag}-session",
        place=SessionPlace.ACCOUNT,
        account=account,
        created_at=now,
        expires_at=at,
    )
    Handoff.objects.create(
        key_hash=f"{tag}-handoff", account=account, lobby=lobby, created_at=now, expires_at=at
    )


def test_only_what_has_expired_goes(lead) -> None:
    now = timezone.now()
    account = Account.objects.create(email="owner@example.com", created_at=now)
    _rows(now, account, lead.agent.lobby, expired=True)
    _rows(now, account, lead.agent.lobby, expired=False)
    assert sweep_expired(now) == {
        "sign_in_codes": 1,
        "throttle_events": 1,
        "web_sessions": 1,
        "handoffs": 1,
    }
    assert SignInCode.objects.get().address_mac == "live-address"
    assert SignInThrottle.objects.get().key == "live"
    assert WebSession.objects.get().token_hash == "live-session"
    assert Handoff.objects.get().key_hash == "live-handoff"


def test_an_idle_sweep_only_reads_and_runs_with_the_retention_timer(lead) -> None:
    now = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        assert not any(sweep_expired(now).values())
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in queries.captured_queries)
    account = Account.objects.create(email="owner@example.com", created_at=now)
    _rows(now, account, lead.agent.lobby, expired=True)
    timers._last_sweep.clear()
    loops.run_retention(now)
    assert not WebSession.objects.exists() and not SignInCode.objects.exists()
