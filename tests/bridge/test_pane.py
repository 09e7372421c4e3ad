"""`pocolobby bridge --deliver tmux`: a real tmux server, a fake agent REPL in a pane, a real
broker subprocess and the bridge as a real subprocess under a simulated MCP host."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pocolobby.bridge.pane import Pane, _flock
from tests.bridge.host import Host
from tests.bridge_client import send_message
from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
FAKE_AGENT = Path(__file__).with_name("fake_agent.py")


@dataclass
class AgentPane:
    socket: Path
    pane_id: str
    log: Path

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    async def wait_for(self, predicate, timeout: float = 20.0) -> list[str]:
        for _ in range(int(timeout * 10)):
            lines = self.lines()
            if predicate(lines):
                return lines
            await asyncio.sleep(0.1)
        raise AssertionError(f"the pane's log never matched: {self.lines()}")


@pytest.fixture
def agent_pane(tmp_path: Path) -> Iterator[AgentPane]:
    socket = Path("/tmp") / f"pl-tmux-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "typed.log"
    command = f"{sys.executable} {FAKE_AGENT} {log}"
    subprocess.run(
        [
            "tmux",
            "-S",
            str(socket),
            "new-session",
            "-d",
            "-s",
            "agent",
            "-x",
            "200",
            "-y",
            "40",
            command,
        ],
        check=True,
        timeout=10,
    )
    pane = AgentPane(socket, "", log)
    pane.pane_id = pane.tmux("list-panes", "-t", "agent", "-F", "#{pane_id}").strip()
    yield pane
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], check=False, timeout=10)
    socket.unlink(missing_ok=True)


def tmux_host(config_path: Path, pane: AgentPane, tmp_path: Path, name: str = "bridge") -> Host:
    return Host(
        config_path,
        str(uuid.uuid4()),
        tmp_path / f"{name}.log",
        extra_env={"TMUX": f"{pane.socket},0,0"},
        bridge_args=["--deliver", "tmux", "--pane", pane.pane_id],
    )


def marked(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("[pocolobby]")]


async def test_notices_are_typed_as_one_line_with_ids_and_never_bodies(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-typed", ["lead", "coder"], tmp_path
    )
    host = await tmux_host(configs["coder"].path, agent_pane, tmp_path).start()
    try:
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        assert marked(lines)[0].startswith("[pocolobby] bootstrap: call get_context, then ready")

        body = "rm -rf / ; echo $(whoami) `id`"
        message_id = await send_message(
            module_broker.url, configs["lead"].token, "coder", body, "p-1"
        )
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert marked(lines)[1] == (
            f"[pocolobby] 1 new message: ids {message_id} - call get_messages, "
            "then acknowledge_messages"
        )
        assert not any("rm -rf" in line for line in lines)
        assert host.events == []  # nothing went to the channel

        context = await host.ok("get_context")
        assert context["bridge"]["delivery"]["transport"] == "tmux"
        assert context["bridge"]["delivery"]["pane"] == agent_pane.pane_id
    finally:
        await host.close()


async def test_a_busy_pane_holds_the_notice_until_its_prompt_returns(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-busy", ["lead", "coder"], tmp_path
    )
    host = await tmux_host(configs["coder"].path, agent_pane, tmp_path).start()
    try:
        await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "-l", "busy 4")
        agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "Enter")
        await agent_pane.wait_for(lambda ls: "busy 4" in ls)
        message_id = await send_message(
            module_broker.url, configs["lead"].token, "coder", "later", "p-2"
        )
        await asyncio.sleep(2.0)
        assert len(marked(agent_pane.lines())) == 1  # held while the agent works
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert f"ids {message_id} " in marked(lines)[1]
        assert lines.index("busy 4") < lines.index(marked(lines)[1])
    finally:
        await host.close()


async def test_another_writer_holding_the_pane_lock_keeps_the_bridge_from_typing(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-lock", ["lead", "coder"], tmp_path
    )
    host = await tmux_host(configs["coder"].path, agent_pane, tmp_path).start()
    try:
        await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        lock = Pane(agent_pane.pane_id, str(agent_pane.socket)).lock_path()
        with _flock(lock) as held:
            assert held
            message_id = await send_message(
                module_broker.url, configs["lead"].token, "coder", "x", "p-3"
            )
            await asyncio.sleep(2.5)
            assert len(marked(agent_pane.lines())) == 1
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert f"ids {message_id} " in marked(lines)[1]
    finally:
        await host.close()


async def test_deliver_tmux_without_a_pane_refuses_to_start(tmp_path: Path, module_broker: Broker):
    configs = await asyncio.to_thread(module_broker.provision, "pane-none", ["coder"], tmp_path)
    env = clean_env()
    env.pop("TMUX_PANE", None)
    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "pocolobby",
            "bridge",
            "--config",
            str(configs["coder"].path),
            "--deliver",
            "tmux",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 1 and "needs a pane" in result.stderr
    gone = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "pocolobby",
            "bridge",
            "--config",
            str(configs["coder"].path),
            "--deliver",
            "tmux",
            "--pane",
            "%999999",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert gone.returncode == 1 and "tmux display-message" in gone.stderr


async def test_a_message_acknowledged_while_held_is_not_typed(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-acked", ["lead", "coder"], tmp_path
    )
    lead = configs["lead"].token
    host = await tmux_host(configs["coder"].path, agent_pane, tmp_path).start()
    try:
        await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "-l", "busy 4")
        agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "Enter")
        await agent_pane.wait_for(lambda ls: "busy 4" in ls)
        held = await send_message(module_broker.url, lead, "coder", "read by polling", "p-4")
        await asyncio.sleep(1.0)
        await host.ok("acknowledge_messages", message_ids=[held])

        after = await send_message(module_broker.url, lead, "coder", "next", "p-5")
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert f"ids {after} " in marked(lines)[1]
        assert not any(f"ids {held} " in line for line in marked(lines))
    finally:
        await host.close()


async def test_two_bridges_on_one_pane_type_whole_lines(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-two", ["lead", "one", "two"], tmp_path
    )
    hosts = [
        await tmux_host(configs[name].path, agent_pane, tmp_path, name).start()
        for name in ("one", "two")
    ]
    try:
        await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        lead = configs["lead"].token
        sent = await asyncio.gather(
            *(
                send_message(module_broker.url, lead, name, "hi", f"p-{name}-{n}")
                for n in range(3)
                for name in ("one", "two")
            )
        )
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) >= 4, timeout=30)
        await asyncio.sleep(1.0)
        lines = agent_pane.lines()
        whole = re.compile(
            r"^\[pocolobby\] (bootstrap: call get_context, then ready with nonce [A-Za-z0-9_-]+"
            r"|\d+ new messages?: ids \d+(,\d+)* - call get_messages, then acknowledge_messages)$"
        )
        assert all(whole.match(line) for line in lines), lines
        typed = {
            int(i)
            for line in marked(lines)[2:]
            for i in line.split("ids ")[1].split()[0].split(",")
        }
        assert typed == set(sent)
    finally:
        for host in reversed(hosts):  # each host's task scopes close in reverse order
            await host.close()
