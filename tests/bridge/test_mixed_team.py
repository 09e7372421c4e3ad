"""A mixed team on one broker (issue 42): a simulated Claude Code host whose turns come from
the real `pocolobby hook` command (Claude Code's hook JSON on stdin), real Codex CLI and real
Gemini CLI in tmux against loopback model stand-ins (tests/bridge/test_hosts.py), bash in a
pane behind a headless bridge, and an agent that only uses `pocolobby msg`. A coordinator on
a real bridge watches them all: an `activity` event reaches it within 5 s of each start and
end of a turn, list_agents says the same, and no watcher is told about itself. Codex's bridge
also sends Codex's token counts, read from its session files after its turns.

The broker runs with the receipt spacing and the working-after-a-turn grace at 1 s
(POCOLOBBY_RECEIPT_SPACING_SECONDS, POCOLOBBY_WORKING_AFTER_TURN_SECONDS): at their defaults
(30 s, 2 min) a turn's end is told two minutes later, by design. Skipped like test_hosts.py
when a host is missing, unless POCOLOBBY_REQUIRE_CODEX=1 / POCOLOBBY_REQUIRE_GEMINI=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.host import ChannelEvent, Host
from tests.bridge.test_hosts import Session, _bootstrapped, real_host
from tests.bridge.test_pane_programs import headless
from tests.eventually import eventually_async
from tests.server import REPO_ROOT, Broker, BrokerFactory, clean_env
from tests.shell_pane import shell_pane

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio,
    pytest.mark.skipif(
        shutil.which("tmux") is None or shutil.which("bash") is None,
        reason="tmux or bash is not installed",
    ),
]
WITHIN = 5.0
TURN_SECONDS = 3
TEAM = ["lead", "claude", "codex", "gemini", "shell", "scripted"]


def _changes(event: ChannelEvent) -> list[dict[str, Any]]:
    return event.payload["activity"] if event.meta.get("scope") == "activity" else []


async def _told(watcher: Host, agent: str, state: str, edge: float, after: int) -> None:
    """An activity event saying `agent` is now `state`, within WITHIN s of the edge (wall)."""
    left = WITHIN - (time.time() - edge)
    assert left > 0, f"{agent} {state}: the edge was already {WITHIN} s ago"
    await watcher.event(
        lambda e: any((c["agent_id"], c["activity"]) == (agent, state) for c in _changes(e)),
        after=after,
        timeout=left,
    )


async def _listed(watcher: Host, agent: str) -> dict[str, Any]:
    listed = await watcher.ok("list_agents")
    return {a["agent_id"]: a for a in listed["agents"]}[agent]


def _token_rows(broker: Broker, agent: str) -> list[tuple[int, int]]:
    with sqlite3.connect(broker.data_dir / "pocolobby.sqlite3") as db:
        return db.execute(
            "SELECT s.input_tokens, s.output_tokens FROM board_tokensession s "
            "JOIN lobbies_agent a ON a.id = s.agent_id WHERE a.agent_id = ? "
            "AND s.output_tokens > 0",
            [agent],
        ).fetchall()


def _hook(config: Path, event: dict[str, Any], project: Path) -> None:
    """`pocolobby hook` as Claude Code runs a hook: through the shell, the event on stdin."""
    done = subprocess.run(
        ["/bin/sh", "-c", f"{sys.executable} -m pocolobby hook --config {config}"],
        input=json.dumps(event), cwd=project,
        env=clean_env({"PYTHONPATH": str(REPO_ROOT), "CLAUDE_PROJECT_DIR": str(project)}),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "", done


async def test_a_coordinator_is_told_every_turn_of_a_mixed_team(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker: Broker = await asyncio.to_thread(
        broker_factory,
        {"POCOLOBBY_RECEIPT_SPACING_SECONDS": "1", "POCOLOBBY_WORKING_AFTER_TURN_SECONDS": "1"},
    )
    configs = await asyncio.to_thread(broker.provision, "mixed", TEAM, tmp_path / "agents")
    for watcher in ("lead", "claude"):
        await asyncio.to_thread(
            broker.cli_ok, "agent", "permissions", "mixed", watcher, "--manage-rooms", "yes"
        )
    with contextlib.ExitStack() as stack:
        hosts: dict[str, Session] = {}
        facts: dict[str, dict[str, Any]] = {}
        for name in ("codex", "gemini"):
            session, pids = stack.enter_context(real_host(name, configs[name].path))
            hosts[name], facts[name] = session, {"host": name, "pids": pids}
        pane = stack.enter_context(shell_pane(tmp_path / "shell"))
        stack.enter_context(
            headless(configs["shell"].path, "--pane", pane.pane_id,
                     env={"TMUX": f"{pane.socket},0,0"})
        )  # fmt: skip
        lead = await Host(configs["lead"].path, str(uuid.uuid4()), tmp_path / "lead.log").start()
        claude = await Host(
            configs["claude"].path, str(uuid.uuid4()), tmp_path / "claude.log"
        ).start()
        try:
            for host in (lead, claude):
                await host.bootstrapped()
                assert (await host.ok("watch_agents"))["every_agent"] is True
            await asyncio.gather(*(_bootstrapped(hosts[n], facts[n]) for n in hosts))
            pane.wait_for(lambda s: "# pocolobby: bootstrap" in s)
            msg = subprocess.run(
                [sys.executable, "-m", "pocolobby", "msg", "inbox", "--config",
                 str(configs["scripted"].path)],
                cwd=REPO_ROOT, env=clean_env(), capture_output=True, text=True, timeout=60,
                check=False,
            )  # fmt: skip
            assert msg.returncode == 0, msg.stderr
            scripted = await _listed(lead, "scripted")
            assert (scripted["activity"], scripted["through_msg"]) == ("idle", True), scripted
            await _turns(lead, hosts, pane, configs, tmp_path)
            # Codex's bridge read Codex's own session files after its turns: counts per day.
            await eventually_async(
                lambda: _token_rows(broker, "codex"), timeout=10, what="codex's token counts"
            )

            # The coordinator's own turn: its watcher hears of it, the coordinator does not.
            before = len(claude.events)
            edge = time.time()
            own = {"session_id": "s-lead", "cwd": str(tmp_path), "prompt": "plan",
                   "transcript_path": str(tmp_path / "s-lead.jsonl")}  # fmt: skip
            _hook(configs["lead"].path, {**own, "hook_event_name": "UserPromptSubmit"}, tmp_path)
            await _told(claude, "lead", "working", edge, before)
        except AssertionError:
            for name, session in hosts.items():
                print(f"{name}'s pane:\n{session.screen()}")
            print(f"the shell pane:\n{pane.screen()}\nlead's bridge:\n{lead.log_text()}")
            raise
        finally:
            await claude.close()
            await lead.close()
        for watcher, name in ((lead, "lead"), (claude, "claude")):
            about = [c["agent_id"] for e in watcher.events for c in _changes(e)]
            assert about and name not in about, (name, about)


async def _turns(
    lead: Host, hosts: dict[str, Session], pane: Any, configs: dict[str, Any], tmp_path: Path
) -> None:
    """One turn of each turn-taking agent, its start and its end told to the coordinator."""
    expected_host = {"claude": "claude-code", "codex": "codex", "gemini": "gemini",
                     "shell": "shell"}  # fmt: skip
    for agent in ("claude", "shell", "codex", "gemini"):
        # Settled first: a pane host's bootstrap turn ends before its measured one starts.
        await eventually_async(
            lambda a=agent: _not_working(lead, a),
            timeout=30,
            every=0.2,
            what=f"{agent} finishing its earlier turn",
        )
        before = len(lead.events)
        if agent == "claude":
            project = tmp_path / "claude-project"
            project.mkdir(exist_ok=True)
            turn = {"session_id": "s-1", "cwd": str(project),
                    "transcript_path": str(project / "s-1.jsonl")}  # fmt: skip
            (project / "s-1.jsonl").write_text("")
            started = time.time()
            submit = {**turn, "hook_event_name": "UserPromptSubmit", "prompt": "go"}
            _hook(configs["claude"].path, submit, project)
            await _told(lead, agent, "working", started, before)
            entry = await _listed(lead, agent)
            before = len(lead.events)
            ended = time.time()
            _hook(configs["claude"].path, {**turn, "hook_event_name": "Stop"}, project)
        elif agent == "shell":
            started = time.time()
            pane.type(f"sleep {TURN_SECONDS}")
            await _told(lead, agent, "working", started, before)
            entry = await _listed(lead, agent)
            before = len(lead.events)
            ended = started + TURN_SECONDS
        else:
            session = hosts[agent]
            requests = len(session.records("requests.jsonl"))
            session.type(f"work {TURN_SECONDS}")
            started = time.time()
            await _told(lead, agent, "working", started, before)
            entry = await _listed(lead, agent)
            before = len(lead.events)
            work = [r for r in session.records("requests.jsonl")[requests:] if "work" in r.get(
                "step", {})]  # fmt: skip
            assert work, f"{agent}: the stand-in never saw the turn"
            ended = float(work[0]["t"]) + TURN_SECONDS
        assert (entry["activity"], entry["host"]) == ("working", expected_host[agent]), entry
        await asyncio.sleep(max(0.0, ended - time.time()))
        await _told(lead, agent, "idle", ended, before)
        assert (await _listed(lead, agent))["activity"] == "idle"


async def _not_working(lead: Host, agent: str) -> bool:
    return (await _listed(lead, agent))["activity"] != "working"
