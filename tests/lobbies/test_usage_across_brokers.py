"""Plan usage lives in the store: a reading one broker stored is what another broker shows.

Two real broker processes on one PostgreSQL database of the test's own (skipped without
PostgreSQL unless POCOLOBBY_REQUIRE_POSTGRES=1)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.postgres import own_database, url
from tests.scale_out import usage_of
from tests.server import Broker

# Its brokers use a database of the test's own whatever DATABASE_URL says: once is enough.
pytestmark = [pytest.mark.slow, pytest.mark.vendor_neutral]


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    for database in own_database("pocolobby_usage"):
        token = f"pla_{secrets.token_urlsafe(24)}"
        env = {"DATABASE_URL": url(database), "POCOLOBBY_ADMIN_TOKEN": token}
        a = Broker(tmp_path / "a", env=env).start()  # the first start prepares the store
        b = Broker(tmp_path / "b", env=env).start()
        # The CLI reads the admin token from its data directory (it never sees the env).
        (a.data_dir / "admin-token").write_text(token + "\n")
        (a.data_dir / "admin-token").chmod(0o600)
        try:
            yield a, b
        finally:
            b.stop()
            a.stop()


def test_a_reading_reported_to_one_broker_is_listed_by_the_other(
    brokers: tuple[Broker, Broker], tmp_path: Path
) -> None:
    a, b = brokers
    configs = a.provision("team", ["lead", "ops"], tmp_path / "configs")
    lead, ops = configs["lead"], configs["ops"]
    assert usage_of(b, ops.token, "lead") is None
    now = int(time.time())
    reading = {
        "five_hour": {"used_percentage": 58, "resets_at": now + 2 * 3600},
        "seven_day": {"used_percentage": 40, "resets_at": now + 3 * 86400},
    }

    stored = httpx.put(f"{a.url}/v1/usage", json=reading, headers=lead.headers, timeout=10)

    assert stored.status_code == 200, stored.text
    told = stored.json()["usage"]
    shown = usage_of(b, ops.token, "lead")
    assert shown is not None
    for key in ("five_hour", "seven_day", "pace_points", "off_pace"):
        assert shown[key] == told[key], key
    assert shown == usage_of(a, ops.token, "lead") | {
        "reading_age_seconds": shown["reading_age_seconds"]
    }
