"""A bootstrap costs at most one turn (issue 43): the bridge repeats an unanswered bootstrap
quickly for a session that shows nothing, and not once the session shows it is working (it
called a tool since, a tool call is running, its hooks say a turn is running); the broker's
own retry, at its schedule's longest delay, is then the next copy. A busy pane holds one
bootstrap line whatever the retries, and drops it once its nonce was echoed.

In-process with the fake host and broker of test_units.py and the repeat pauses shortened;
each test waits for the repeat schedule to end, a fact, before counting what was written.
The broker's retry through a real broker and bridge is the last test.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pocolobby import agent_reports
from pocolobby.bridge import notices
from pocolobby.bridge.config import Runtime, derive_runtime_id, load_config
from pocolobby.bridge.core import Bridge
from pocolobby.bridge.results import Stop
from pocolobby.bridge.turns import record_turn
from tests.bridge.host import Host
from tests.bridge.test_bridge import host_for, provision, session_id
from tests.bridge.test_units import FakeBroker, FakeHost, Frames, make_bridge, notice, welcome
from tests.eventually import eventually_async
from tests.server import BrokerFactory

pytest_plugins = ("tests.server_fixtures",)

REPEATS = len(notices.BOOTSTRAP_REPEAT_DELAYS)


@pytest.fixture(autouse=True)
def quick_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notices, "BOOTSTRAP_REPEAT_DELAYS", (0.02,) * REPEATS)


async def offer(bridge: Bridge, frames: Frames, nonce: str = "n1", notice_id: str = "boot") -> None:
    await bridge.notices.on_notice(notice(notice_id, "bootstrap", [], {"nonce": nonce}), frames)


async def schedule_ended(bridge: Bridge) -> None:
    assert bridge.notices._repeater is not None
    await asyncio.wait_for(asyncio.shield(bridge.notices._repeater), 10)


@pytest.mark.asyncio
async def test_a_session_that_never_answers_gets_every_repeat():
    bridge, host, _ = make_bridge()
    welcome(bridge)
    await offer(bridge, Frames())
    await schedule_ended(bridge)
    assert len(host.channel()) == 1 + REPEATS
    assert len({str(p) for p in host.channel()}) == 1  # identical copies


@pytest.mark.asyncio
async def test_get_context_after_the_bootstrap_stops_the_repeats():
    bridge, host, _ = make_bridge()
    welcome(bridge)
    await offer(bridge, Frames())
    assert not (await bridge.call_tool("get_context", {})).is_error
    await schedule_ended(bridge)
    assert len(host.channel()) == 1
    assert "n1" in bridge.continuity.quiet_nonces


@pytest.mark.asyncio
async def test_a_tool_call_running_through_the_bridge_stops_the_repeats():
    broker = FakeBroker()
    release = asyncio.Event()
    answer = broker.call

    async def slow_call(name: str, arguments: dict) -> object:
        if name == "get_messages":
            await release.wait()
        return await answer(name, arguments)

    broker.call = slow_call  # type: ignore[method-assign]
    bridge, host, _ = make_bridge(broker)
    welcome(bridge)
    running = asyncio.ensure_future(bridge.call_tool("get_messages", {}))
    await eventually_async(lambda: bridge.continuity.tool_calls_running, every=0)
    await offer(bridge, Frames())
    await schedule_ended(bridge)
    release.set()
    await running
    assert len(host.channel()) == 1


@pytest.mark.asyncio
async def test_a_turn_the_hooks_say_is_running_stops_the_repeats_and_only_this_sessions(
    tmp_path: Path,
):
    path = tmp_path / "beta.json"
    path.write_text(
        json.dumps(
            {"url": "http://127.0.0.1:9", "token": "plt_x", "lobby": "team", "agent": "beta"}
        )
    )
    path.chmod(0o600)
    config = load_config(path)
    runtime = Runtime(derive_runtime_id("plt_x", "s1"), "conversation")

    def turn(event: str, session: str) -> None:  # Claude Code's hook, as it runs it
        stdin = json.dumps({"hook_event_name": event, "session_id": session})
        assert agent_reports.hook(str(path), stdin) == 0

    async def copies() -> int:
        host = FakeHost()
        bridge = Bridge(config, runtime, host, FakeBroker())  # type: ignore[arg-type]
        welcome(bridge)
        await offer(bridge, Frames())
        await schedule_ended(bridge)
        return len(host.channel())

    turn("UserPromptSubmit", "another-session")
    assert await copies() == 1 + REPEATS  # another conversation's turn says nothing
    turn("UserPromptSubmit", "s1")
    assert await copies() == 1
    turn("Stop", "s1")
    assert await copies() == 1 + REPEATS
    # A turn an earlier process of the conversation left open (no Stop after an interrupt).
    record_turn(config, "start", "s1", time.time() - notices.TURN_BEFORE_START - 60)
    assert await copies() == 1 + REPEATS


@pytest.mark.asyncio
async def test_the_brokers_retry_of_a_quiet_bootstrap_is_written_and_starts_no_repeats():
    bridge, host, _ = make_bridge()
    welcome(bridge)
    frames = Frames()
    await offer(bridge, frames)
    await bridge.call_tool("get_context", {})
    await schedule_ended(bridge)
    first_schedule = bridge.notices._repeater
    await offer(bridge, frames, notice_id="boot-again")  # the broker's retry, same nonce
    assert frames.kinds("boot-again") == ["received", "host_written"]
    assert bridge.notices._repeater is first_schedule  # no new schedule
    assert len(host.channel()) == 2


@pytest.mark.asyncio
async def test_after_a_hand_over_the_refused_turns_last_call_does_not_quiet_the_bootstrap():
    """A refused session's turn keeps calling tools (get_context, to learn why); the call in
    flight when the owner hands over reaches the bridge after the bootstrap was written, from a
    turn that never read it (Claude Code shows an event that lands mid-turn and starts no turn
    for it). That call is no sign of work on the bootstrap: the quick repeats go on, and the
    session's own calls after the first pause still stop them."""
    bridge, host, _ = make_bridge()
    await bridge.on_stop(Stop("runtime_conflict", 409, "another conversation holds beta"))
    assert (await bridge.call_tool("get_context", {})).is_error  # the refused turn
    welcome(bridge)  # handed over
    await offer(bridge, Frames())
    assert not (await bridge.call_tool("get_context", {})).is_error  # the turn's last call
    # the refusal, the bootstrap, a repeat
    await eventually_async(lambda: len(host.channel()) >= 3, timeout=5, every=0.005)
    assert not (await bridge.call_tool("get_context", {})).is_error  # now acting on it
    await schedule_ended(bridge)
    assert "n1" in bridge.continuity.quiet_nonces
    assert len(host.channel()) < 2 + REPEATS


class BusyPane:
    """A pane that stays busy until released, as PaneDelivery.deliver holds a line."""

    def __init__(self) -> None:
        self.idle = asyncio.Event()
        self.lines: list[str] = []
        self.held_reason: str | None = None
        self.last_error: str | None = None

    async def deliver(self, line: str, wanted: Any) -> str:
        self.held_reason = "the agent is busy (no idle prompt)"
        await self.idle.wait()
        self.held_reason = None
        if not wanted():
            return "dropped"
        self.lines.append(line)
        return "typed"


async def _the_broker_retries(bridge: Bridge, frames: Frames) -> None:
    await offer(bridge, frames, notice_id="boot-again")  # same nonce


async def _the_nonce_is_echoed(bridge: Bridge, frames: Frames) -> None:
    assert not (await bridge.call_tool("ready", {"nonce": "n1"})).is_error


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("meanwhile", "typed", "boot", "boot_again"),
    [
        (_the_broker_retries, 1, ["received", "host_written"], ["received"]),
        (_the_nonce_is_echoed, 0, ["received"], []),
    ],
    ids=["whatever-the-retries-one-line", "nonce-echoed-dropped"],
)
async def test_a_busy_pane_holds_one_bootstrap_line_and_drops_it_once_its_nonce_was_echoed(
    meanwhile: Callable[[Bridge, Frames], Awaitable[None]],
    typed: int,
    boot: list[str],
    boot_again: list[str],
):
    bridge, _, _ = make_bridge()
    pane = BusyPane()
    bridge.notices.pane = pane  # type: ignore[assignment]
    welcome(bridge)
    frames = Frames()
    await offer(bridge, frames)
    await eventually_async(lambda: pane.held_reason, every=0)  # the line is held
    await meanwhile(bridge, frames)
    pane.idle.set()
    await asyncio.wait_for(
        asyncio.gather(*bridge.background.tasks), 10
    )  # the line's delivery ended
    assert len(pane.lines) == typed
    assert (frames.kinds("boot"), frames.kinds("boot-again")) == (boot, boot_again)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_after_get_context_the_next_copy_is_the_brokers_at_its_longest_delay(
    broker_factory: BrokerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Real broker and bridge; the broker's longest delay shortened from 300 s to 20 s."""
    monkeypatch.undo()  # the bridge subprocess keeps its own pauses anyway
    longest = 20.0
    broker = broker_factory({"POCOLOBBY_NOTIFY_RETRY_SECONDS": f"{longest:g},{longest:g}"})
    configs = await provision(broker, "quiet", ["beta"], tmp_path)
    host: Host = await host_for(configs["beta"], tmp_path, session_id()).start()
    try:
        await host.tool_names()
        first = await host.bootstrap()
        await host.ok("get_context")
        again = await host.bootstrap(after=host.events.index(first) + 1, timeout=longest + 30)
        assert again.payload["nonce"] == first.payload["nonce"]
        # Before issue 43 the bridge's own repeat came 9 s after the first copy.
        assert again.at - first.at >= longest - 1
    finally:
        await host.close()
