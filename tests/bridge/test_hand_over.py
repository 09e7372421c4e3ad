"""A new conversation with real bridge subprocesses: after the holder's host quits (stdin
closed) the next conversation is admitted and bootstrapped with the previous checkpoint and
backlog; after a crash (SIGKILL: no release) it is refused, waits, shows in `pocolobby
status`, and is admitted by `pocolobby agent hand-over` without a restart."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import pytest

from tests.bridge.host import Host
from tests.bridge_client import send_message
from tests.eventually import eventually_async
from tests.server import AgentConfig, Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


def _host(config: AgentConfig, tmp_path: Path, name: str) -> Host:
    """A host with a conversation of its own (a new CLAUDE_CODE_SESSION_ID)."""
    return Host(config.path, str(uuid.uuid4()), tmp_path / f"{name}.log")


async def _holding(config: AgentConfig, tmp_path: Path, name: str) -> Host:
    host = await _host(config, tmp_path, name).start()
    await host.bootstrapped()
    await host.ok(
        "save_checkpoint",
        expected_revision=0,
        checkpoint={"objective": f"work of {name}"},
        covers_receipts_through=0,
    )
    return host


async def _status(broker: Broker, lobby: str) -> str:
    return (await asyncio.to_thread(broker.cli_ok, "status", lobby)).stdout


async def _waiting_status(broker: Broker, lobby: str) -> str | None:
    """`pocolobby status` once it shows a new conversation waiting to take over beta."""
    status = await _status(broker, lobby)
    return status if "a new conversation is waiting to take over beta" in status else None


async def test_after_the_host_quits_a_new_conversation_is_admitted_and_bootstrapped(
    module_broker: Broker, tmp_path: Path
):
    configs = await asyncio.to_thread(module_broker.provision, "ended", ["alpha", "beta"], tmp_path)
    url, alpha = module_broker.url, configs["alpha"].token
    first = await _holding(configs["beta"], tmp_path, "first")
    assert await first.close() == 0  # the host quits: stdin closed
    assert "its conversation ended at" in await _status(module_broker, "ended")
    waiting = await send_message(url, alpha, "beta", "while nobody held you", "w-1")

    second = await _host(configs["beta"], tmp_path, "second").start()
    try:
        bootstrap = await second.bootstrap()
        assert bootstrap.payload["backlog"]["message_ids"] == [waiting]
        _, context = await second.bootstrapped()
        assert context["checkpoint"]["checkpoint"] == {"objective": "work of first"}
        assert context["bridge"]["connection"] == "connected"
        later = await send_message(url, alpha, "beta", "after the new start", "l-1")
        await second.message_event(later)
    finally:
        await second.close()
    assert "not connected" not in " ".join(e.content for e in second.events)


async def test_a_quit_by_signal_ends_the_conversation_too(module_broker: Broker, tmp_path: Path):
    """Claude Code quits a server with SIGINT: that is a clean end as well."""
    configs = await asyncio.to_thread(module_broker.provision, "signalled", ["beta"], tmp_path)
    first = await _holding(configs["beta"], tmp_path, "first")
    await first.signal(signal.SIGINT)
    assert await first.exited() == 0
    second = await _host(configs["beta"], tmp_path, "second").start()
    try:
        await second.bootstrapped()
    finally:
        await second.close()


async def test_after_a_crash_the_new_conversation_waits_and_hand_over_admits_it(
    module_broker: Broker, tmp_path: Path
):
    configs = await asyncio.to_thread(
        module_broker.provision, "crashed", ["alpha", "beta"], tmp_path
    )
    url, alpha = module_broker.url, configs["alpha"].token
    first = await _holding(configs["beta"], tmp_path, "first")
    await first.kill()  # no release: the broker cannot tell it from a lost network

    second = await _host(configs["beta"], tmp_path, "second").start()
    try:
        refused = await second.event(lambda e: "not connected" in e.content)
        assert "pocolobby agent hand-over crashed beta" in refused.content
        assert "never ended cleanly" in refused.content
        pending = await send_message(url, alpha, "beta", "for whoever takes over", "p-1")
        # Its bridge keeps asking; the owner sees it waiting, then hands over.
        status = await eventually_async(
            lambda: _waiting_status(module_broker, "crashed"), every=0.5, what="the wait shown"
        )
        assert "pocolobby agent hand-over crashed beta" in status, status
        handed = await asyncio.to_thread(
            module_broker.cli_ok, "agent", "hand-over", "crashed", "beta"
        )
        assert handed.stdout.startswith("handed beta over to the waiting conversation")

        bootstrap = await second.bootstrap(timeout=20)
        assert pending in bootstrap.payload["backlog"]["message_ids"]
        _, context = await second.bootstrapped()
        assert context["checkpoint"]["checkpoint"] == {"objective": "work of first"}
        assert context["bridge"]["connection"] == "connected"
        sent = await second.ok(
            "send_message", to="alpha", content="took over", client_request_id="t-1"
        )
        assert sent["message_id"]
        await second.wait_list_changed(1)  # the host lists the tools again: they work now
    finally:
        await second.close()

    # The crashed conversation comes back (claude --resume): it was retired by the hand over.
    comeback = Host(first.config_path, first.session_id, tmp_path / "comeback.log")
    await comeback.start()
    try:
        notice = await comeback.event(lambda e: "not connected" in e.content)
        assert "retired" in notice.content
    finally:
        await comeback.close()
