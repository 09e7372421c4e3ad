"""How a bridge starts in a host (issue 27): it claims the agent only once the host is a
session, so a health check claims nothing and the first push comes after the host listens;
an unanswered bootstrap is offered again, identical; a model that missed it is told to call
get_context first. Real broker and bridge subprocesses, the simulated host of
tests/bridge/host.py (real Claude Code: tests/bridge/test_claude_code.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pocolobby.bridge.core import CONTEXT_FIRST
from pocolobby.bridge.listing import CONTEXT_FIRST_HINT
from tests.bridge.host import Host
from tests.bridge.test_bridge import host_for, owner_status, provision, session_id
from tests.bridge_client import send_message
from tests.eventually import eventually_async
from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def health_check(host: Host) -> list[str]:
    """What `claude mcp list` does: handshake, list the tools, quit at once."""
    await host.start()
    names = await host.tool_names()
    assert await host.close() == 0
    return names


async def test_a_health_check_lists_the_tools_and_claims_nothing(
    module_broker: Broker, tmp_path: Path
):
    configs = await provision(module_broker, "health", ["alpha", "beta"], tmp_path)
    holder = await host_for(configs["beta"], tmp_path, session_id(), "holder").start()
    try:
        _, context = await holder.bootstrapped()
        before = (await owner_status(module_broker, "health"))["beta"]
        for n in range(3):
            check = host_for(configs["beta"], tmp_path, session_id(), f"check{n}")
            names = await health_check(check)
            assert "get_context" in names and "send_message" in names
            assert check.events == []
            assert check.log_text() == ""  # no refusal: nothing was asked of the stream
        after = (await owner_status(module_broker, "health"))["beta"]
        assert after["runtime_id"] == before["runtime_id"]
        still = await holder.ok("get_context")
        assert still["bridge"]["generation"] == context["bridge"]["generation"]
        assert still["bridge"]["connection"] == "connected"
        sent = await send_message(module_broker.url, configs["alpha"].token, "beta", "hi", "h-1")
        await holder.message_event(sent)  # the live session keeps receiving
    finally:
        await holder.close()


async def test_a_health_check_of_a_free_agent_does_not_take_it(
    module_broker: Broker, tmp_path: Path
):
    configs = await provision(module_broker, "healthfree", ["beta"], tmp_path)
    await health_check(host_for(configs["beta"], tmp_path, session_id(), "check"))
    session = await host_for(configs["beta"], tmp_path, session_id(), "session").start()
    try:
        _, context = await session.bootstrapped()
        assert context["bridge"]["connection"] == "connected"
    finally:
        await session.close()


async def test_the_stream_waits_for_the_tool_list_then_a_second(
    module_broker: Broker, tmp_path: Path
):
    configs = await provision(module_broker, "afterlist", ["beta"], tmp_path)
    host = await host_for(configs["beta"], tmp_path, session_id()).start()
    try:
        await host.tool_names()
        listed = time.perf_counter()
        event = await host.bootstrap()
        assert event.at - listed >= 0.9
    finally:
        await host.close()


async def test_an_unanswered_bootstrap_is_offered_again_identical_until_ready(
    module_broker: Broker, tmp_path: Path
):
    configs = await provision(module_broker, "repeat", ["beta"], tmp_path)
    host = host_for(configs["beta"], tmp_path, session_id())
    host.bridge_args = ["--verbose"]  # the repeater's end is a log line
    await host.start()
    try:
        await host.tool_names()
        first = await host.bootstrap()
        again = await host.bootstrap(after=host.events.index(first) + 1, timeout=10)
        assert (again.content, again.meta) == (first.content, first.meta)
        assert again.at - first.at >= 2.5
        context = await host.ok("get_context")
        assert context["bridge"]["bootstrap_nonce"] == first.payload["nonce"]
        await host.ok("ready", nonce=first.payload["nonce"])
        count = len(host.events)
        # The repeater's next wake (6 s after the second offer) finds the bootstrap answered.
        answered = f"bootstrap {first.payload['nonce']} answered: not offered again"
        await eventually_async(lambda: answered in host.log_text(), timeout=15)
        assert len(host.events) == count
    finally:
        await host.close()


async def test_until_get_context_every_tool_says_to_call_it_first(
    module_broker: Broker, tmp_path: Path
):
    configs = await provision(module_broker, "contextfirst", ["beta"], tmp_path)
    host = await host_for(configs["beta"], tmp_path, session_id()).start()
    try:
        assert host.session is not None
        tools = (await host.session.list_tools()).tools
        assert all(
            (t.description or "").endswith(CONTEXT_FIRST_HINT)
            for t in tools
            if t.name not in ("get_context", "ready")
        )
        before = await host.call("list_agents")
        assert before.notes == [CONTEXT_FIRST] and not before.is_error
        assert "agents" in json.loads(before.text)
        await host.ok("get_context")
        after = await host.call("list_agents")
        assert after.notes == []
    finally:
        await host.close()


async def test_a_tool_call_before_the_second_is_over_claims_at_once(
    module_broker: Broker, tmp_path: Path
):
    """A host that never lists tools but calls one is a session."""
    configs = await provision(module_broker, "callfirst", ["beta"], tmp_path)
    host = await host_for(configs["beta"], tmp_path, session_id()).start()
    try:
        started = time.perf_counter()
        context = await host.ok("get_context")
        assert context["bridge"]["connection"] == "connected"
        assert time.perf_counter() - started < 5
    finally:
        await host.close()
