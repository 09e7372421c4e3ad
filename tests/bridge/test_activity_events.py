"""A coordinator watching agents gets `activity` channel events from a real broker, within
seconds of a turn's start and end, never a message body; list_agents says the same."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tests.bridge.host import Host
from tests.bridge_client import api
from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def test_a_watching_coordinator_gets_activity_events_through_its_channel(
    module_broker: Broker, tmp_path: Path
):
    configs = await asyncio.to_thread(
        module_broker.provision, "watching", ["lead", "backend"], tmp_path
    )
    await asyncio.to_thread(
        module_broker.cli_ok, "agent", "permissions", "watching", "lead", "--manage-rooms", "yes"
    )
    backend = configs["backend"].token
    # A shell agent: present through its msg calls (no bridge), then its pane's turns.
    await api(module_broker.url, backend, "POST", "/v1/tools/list_agents", {})
    lead = await Host(configs["lead"].path, str(uuid.uuid4()), tmp_path / "lead.log").start()
    try:
        await lead.bootstrapped()
        assert await lead.ok("watch_agents") == {"every_agent": True, "watching": None}
        before = len(lead.events)
        loop = asyncio.get_running_loop()
        turn = {"event": "start", "host": "shell"}
        await api(module_broker.url, backend, "POST", "/v1/turns", turn)
        started = loop.time()
        event = await lead.event(lambda e: e.meta.get("scope") == "activity", after=before)
        assert loop.time() - started < 5
        [change] = event.payload["activity"]
        assert (change["agent_id"], change["activity"]) == ("backend", "working")
        assert set(change) == {"agent_id", "activity", "since"}  # never a body
        assert "backend started working" in event.content and "No reply needed" in event.content
        listed = await lead.ok("list_agents")
        entry = {a["agent_id"]: a for a in listed["agents"]}["backend"]
        assert (entry["activity"], entry["host"], entry["through_msg"]) == (
            "working",
            "shell",
            True,
        )
    finally:
        await lead.close()
