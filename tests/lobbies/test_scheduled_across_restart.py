"""A scheduled time that passes while the broker is down is delivered once, marked late."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.eventually import eventually
from tests.server import BrokerFactory

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def test_a_message_due_during_downtime_arrives_once_and_late(
    broker_factory: BrokerFactory, tmp_path
) -> None:
    broker = broker_factory(env={"POCOLOBBY_LATE_AFTER_SECONDS": "2"})
    agents = broker.provision("timed", ["lead", "backend"], tmp_path / "configs")
    lead, backend = agents["lead"], agents["backend"]
    due = datetime.now(UTC) + timedelta(seconds=3)
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        sent = http.post(
            "/v1/messages",
            headers=lead.headers,
            json={
                "to": "backend",
                "content": "reminder",
                "client_request_id": "timed-1",
                "deliver_at": due.isoformat(),
            },
        ).json()
    assert sent["status"] == "stored"
    broker.kill9()
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 3)  # past the late mark
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10) as http:
        inbox = eventually(
            lambda: http.get("/v1/messages", headers=backend.headers).json()["messages"],
            every=0.2,
            what="the late message in the inbox",
        )
        assert [m["message_id"] for m in inbox] == [sent["message_id"]]
        assert inbox[0]["late"] is True
        broker.restart()
        again = http.get("/v1/messages", headers=backend.headers).json()["messages"]
        assert [m["message_id"] for m in again] == [sent["message_id"]]
