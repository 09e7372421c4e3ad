"""Real Claude Code (the npm package) against the real bridge and broker, offline.

Each session runs `claude --dangerously-load-development-channels server:pocolobby` in a tmux
window of a throwaway HOME, configured by the real `pocolobby connect`, talking to a loopback
stand-in for the Messages API (tests/bridge/claude_code.py) whose scripted model calls
get_context then ready when a bootstrap event reaches it. A stdio tap between Claude Code and
the bridge and Claude Code's own debug log say what happened when a case fails.

Skipped where tmux or Claude Code is missing, unless POCOLOBBY_REQUIRE_CLAUDE_CODE=1 (then it
fails): install with `npm install --prefix /opt/claude-code @anthropic-ai/claude-code@2`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.bridge.claude_code import (
    REFUSAL_EVENT,
    MessagesAPI,
    Workspace,
    broker_admits_after_a_clean_end,
    why_unavailable,
)
from tests.eventually import eventually
from tests.server import AgentConfig, Broker

pytest_plugins = ("tests.server_fixtures",)

_MISSING = why_unavailable()
if _MISSING and os.environ.get("POCOLOBBY_REQUIRE_CLAUDE_CODE") == "1":
    raise RuntimeError(f"POCOLOBBY_REQUIRE_CLAUDE_CODE=1 but {_MISSING}")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_MISSING is not None, reason=f"real Claude Code: {_MISSING}"),
]

MakeWorkspace = Callable[[str], Workspace]


@pytest.fixture(scope="module")
def api() -> Iterator[MessagesAPI]:
    stand_in = MessagesAPI().start()
    yield stand_in
    stand_in.stop()


@pytest.fixture
def configs(broker: Broker, tmp_path: Path) -> dict[str, AgentConfig]:
    return broker.provision("team", ["coder", "lead"], tmp_path / "configs")


@pytest.fixture
def workspace(
    api: MessagesAPI, broker: Broker, configs: dict[str, AgentConfig], tmp_path: Path
) -> Iterator[Workspace]:
    made = Workspace.create(tmp_path / "claude", api, broker, configs["coder"])
    yield made
    made.close()


def send(broker: Broker, sender: AgentConfig, to: str, content: str) -> None:
    response = httpx.post(
        f"{broker.url}/v1/tools/send_message",
        json={"to": to, "content": content, "client_request_id": uuid.uuid4().hex},
        headers=sender.headers,
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_a_fresh_conversation_reaches_ready_with_its_bootstrap(workspace: Workspace) -> None:
    session = workspace.session("fresh").start()
    nonce = session.wait_ready()
    # The bootstrap the model confirmed is the one Claude Code delivered to it, after it
    # started listening for channel events.
    log = session.debug_log.read_text()
    registered = log.index('"pocolobby": Channel notifications registered')
    delivered = log.index('"pocolobby": notifications/claude/channel: PocoLobby bootstrap')
    assert registered < delivered
    assert nonce in workspace.tap_log.read_text()


def test_claude_mcp_list_during_a_live_session_is_healthy_and_disturbs_nothing(
    workspace: Workspace, broker: Broker, configs: dict[str, AgentConfig], api: MessagesAPI
) -> None:
    session = workspace.session("live").start()
    session.wait_ready()
    listed = workspace.claude_cli("mcp", "list")
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("pocolobby:"))
    assert "Connected" in line and "failed" not in line, listed.stdout
    got = workspace.claude_cli("mcp", "get", "pocolobby")
    assert "Connected" in got.stdout and "failed" not in got.stdout, got.stdout
    assert "runtime_conflict" not in got.stdout
    # The health checks claimed nothing: the live session still holds the agent and receives.
    send(broker, configs["lead"], "coder", "still there after mcp list?")
    eventually(
        lambda: any(
            "still there after mcp list?" in t.last_user_text for t in api.of(session.session_id)
        ),
        timeout=90,
        every=0.25,
        what="the live session to receive the message",
    )
    assert REFUSAL_EVENT not in session.screen()


def test_a_refused_conversation_shows_one_event_and_its_tools_start_with_it(
    workspace: Workspace, api: MessagesAPI
) -> None:
    holder = workspace.session("holder").start()
    holder.wait_ready()
    refused = workspace.session("refused").start()
    screen = refused.wait_for_screen(lambda s: REFUSAL_EVENT in s, 90)
    assert "runtime_conflict" in screen
    # The scripted model calls get_context on the event, as its description says.
    answer = eventually(
        lambda: [
            t.last_user_text
            for t in api.of(refused.session_id)
            if t.last_user_text.startswith(REFUSAL_EVENT) and "bridge" in t.last_user_text
        ],
        timeout=90,
        every=0.25,
        what="the refused session's get_context answer",
    )
    assert isinstance(answer, list) and answer[0].startswith(
        f"{REFUSAL_EVENT} (409 runtime_conflict)."
    )
    time.sleep(3)
    events = [ln for ln in refused.screen().splitlines() if "← pocolobby:" in ln]
    assert len(events) == 1, events
    assert holder.alive() and REFUSAL_EVENT not in holder.screen()


@pytest.mark.skipif(
    _MISSING is None and not broker_admits_after_a_clean_end(),
    reason="needs issue 27's broker side (a clean end admits a new conversation; hand over)",
)
def test_the_ordinary_day_of_a_claude_code_user(
    workspace: Workspace, broker: Broker, configs: dict[str, AgentConfig]
) -> None:
    """Issue 27's sequence: every admitted session reaches ready with its own bootstrap."""
    first = workspace.session("first").start()
    nonces = [first.wait_ready()]
    first.quit()
    second = workspace.session("second").start()  # a fresh conversation, no owner
    nonces.append(second.wait_ready())
    second.quit()
    resumed = workspace.session("first-resumed", resume=first.session_id).start()
    nonces.append(resumed.wait_ready())
    resumed.quit()
    broker.restart()
    after_restart = workspace.session("after-restart", resume=first.session_id).start()
    nonces.append(after_restart.wait_ready())
    # A fresh conversation while that one is live: refused, shown, then handed over.
    waiting = workspace.session("waiting").start()
    waiting.wait_for_screen(lambda s: REFUSAL_EVENT in s, 90)
    # The owner sees the wait once the refused conversation asked again (a health check asks
    # once): hand over when `status` shows it, as an owner reading it would.
    eventually(
        lambda: "waiting to take over coder" in broker.cli_ok("status", "team").stdout,
        timeout=60,
        every=0.5,
        what="the refused conversation shown as waiting",
    )
    broker.cli_ok("agent", "hand-over", "team", "coder")
    nonces.append(waiting.wait_ready(timeout=90))
    assert len(set(nonces)) == len(nonces), nonces
