"""`pocolobby bridge --deliver tmux`: a real tmux server, a fake agent REPL in a pane, a real
broker subprocess and the bridge as a real subprocess under a simulated MCP host."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pocolobby.bridge.pane import Pane, _flock
from tests.bridge.host import Host
from tests.bridge_client import api, send_message
from tests.eventually import eventually_async
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
        return await eventually_async(
            lambda: (lines := self.lines()) and predicate(lines) and lines,
            timeout=timeout,
            what=lambda: f"the pane's log matching: {self.lines()}",
        )


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


def tmux_host(
    config_path: Path,
    pane: AgentPane,
    tmp_path: Path,
    name: str = "bridge",
    *,
    session: str | None = None,
    tmux_first: Path | None = None,
) -> Host:
    """A bridge delivering to `pane`; `tmux_first`: a folder whose `tmux` it runs instead."""
    env = {"TMUX": f"{pane.socket},0,0"}
    if tmux_first is not None:
        env["PATH"] = f"{tmux_first}:{os.environ.get('PATH', '')}"
    return Host(
        config_path,
        session or str(uuid.uuid4()),
        tmp_path / f"{name}.log",
        extra_env=env,
        bridge_args=["--deliver", "tmux", "--pane", pane.pane_id],
    )


def marked(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("# pocolobby:")]


async def test_notices_are_typed_as_one_line_with_ids_and_never_bodies(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-typed", ["lead", "coder"], tmp_path
    )
    host = await tmux_host(configs["coder"].path, agent_pane, tmp_path).start()
    try:
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        assert marked(lines)[0].startswith("# pocolobby: bootstrap: call get_context, then ready")

        body = "rm -rf / ; echo $(whoami) `id`"
        message_id = await send_message(
            module_broker.url, configs["lead"].token, "coder", body, "p-1"
        )
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert marked(lines)[1] == (
            f"# pocolobby: 1 new message: ids {message_id} - call get_messages, "
            "then acknowledge_messages"
        )
        assert not any("rm -rf" in line for line in lines)
        assert host.events == []  # nothing went to the channel
        instructions = (host.initialize_result.instructions or "") if host.initialize_result else ""
        assert '"# pocolobby:"' in instructions and "<channel" not in instructions
        assert "get_messages" in instructions and "ready with the nonce" in instructions

        context = await host.ok("get_context")
        assert context["bridge"]["delivery"]["transport"] == "tmux"
        assert context["bridge"]["delivery"]["pane"] == agent_pane.pane_id
        assert context["bridge"]["delivery"]["note"].startswith("notices are lines typed")
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
        lead = configs["lead"].token
        message_id = await send_message(module_broker.url, lead, "coder", "later", "p-2")
        held = await eventually_async(lambda: _held(agents(module_broker, lead), "coder"))
        assert held["notices_held"]["reason"] == "the agent is busy (no idle prompt)"
        assert len(marked(agent_pane.lines())) == 1  # held while the agent works
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert f"ids {message_id} " in marked(lines)[1]
        assert lines.index("busy 4") < lines.index(marked(lines)[1])
    finally:
        await host.close()


@contextlib.asynccontextmanager
async def pane_lock_taken(path: Path) -> AsyncIterator[None]:
    """Hold the pane lock as another writer, once the bridge let it go: it keeps it after a
    line until the pane shows the line's Enter taken, a moment after the agent read it."""
    for _ in range(100):
        with _flock(path) as held:
            if held:
                yield
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the bridge never let the pane lock go")


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
        async with pane_lock_taken(lock):
            lead = configs["lead"].token
            message_id = await send_message(module_broker.url, lead, "coder", "x", "p-3")
            held = await eventually_async(lambda: _held(agents(module_broker, lead), "coder"))
            assert held["notices_held"]["reason"] == "another writer holds the pane lock"
            assert len(marked(agent_pane.lines())) == 1
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert f"ids {message_id} " in marked(lines)[1]
    finally:
        await host.close()


async def agents(broker: Broker, token: str) -> dict[str, dict]:
    """list_agents as a coordinator reads it."""
    answer = await api(broker.url, token, "POST", "/v1/tools/list_agents", {})
    return {a["agent_id"]: a for a in answer["agents"]}


async def inbox(broker: Broker, token: str) -> list[int]:
    answer = await api(broker.url, token, "POST", "/v1/tools/get_messages", {"view": "inbox"})
    return [m["message_id"] for m in answer["messages"]]


@pytest.mark.parametrize("fault", ["no TMUX_PANE", "no tmux", "pane gone"])
async def test_deliver_tmux_without_a_usable_pane_says_why_and_the_broker_keeps_messages(
    module_broker: Broker, tmp_path: Path, fault: str
):
    lobby = "pane-none-" + re.sub("[^a-z]+", "-", fault.lower())
    configs = await asyncio.to_thread(module_broker.provision, lobby, ["lead", "coder"], tmp_path)
    extra: dict[str, str] = {"TMUX_PANE": ""}
    args = ["--deliver", "tmux"]
    if fault == "no tmux":
        extra["PATH"] = str(Path(sys.executable).parent)  # python, and no tmux
        args += ["--pane", "%1"]
    elif fault == "pane gone":
        args += ["--pane", "%999999"]
    host = Host(
        configs["coder"].path, str(uuid.uuid4()), tmp_path / "b.log", extra, bridge_args=args
    )
    await host.start()
    try:
        said = {
            "no TMUX_PANE": "needs a pane",
            "no tmux": "tmux is not installed",
            "pane gone": "pane %999999 is on none of your tmux servers (tried: ",
        }[fault]
        assert said in host.log_text() and "Pushes are off" in host.log_text()
        tools = await host.session.list_tools()
        assert all(t.description.startswith("PUSHES ARE OFF: ") for t in tools.tools)
        assert said in tools.tools[0].description
        context = await host.ok("get_context")
        assert said in context["bridge"]["delivery"]["problem"]

        lead = configs["lead"].token
        sent = await send_message(module_broker.url, lead, "coder", "are you there", "n-1")
        facts = await eventually_async(
            lambda: _held(agents(module_broker, lead), "coder")
        )  # reported by the bridge's delivery frame
        assert facts["transport"] == "tmux" and said in facts["notices_held"]["reason"]
        assert host.events == []  # nothing went to a channel either
        assert sent in await inbox(module_broker, configs["coder"].token)  # still pending
    finally:
        await host.close()


async def _held(listing, name: str):
    entry = (await listing)[name]
    return entry if entry["notices_held"] else None


async def test_a_pane_that_never_idles_holds_then_requires_attention_and_loses_nothing(
    broker_factory, tmp_path: Path, agent_pane: AgentPane
):
    broker = broker_factory({"POCOLOBBY_NOTIFY_RETRY_SECONDS": "2,2,2,2,2,2,2,2,2,2"})
    configs = await asyncio.to_thread(broker.provision, "pane-stuck", ["lead", "coder"], tmp_path)
    lead = configs["lead"].token
    host = tmux_host(configs["coder"].path, agent_pane, tmp_path)
    host.bridge_args += ["--hold-seconds", "3"]
    await host.start()
    try:
        await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        assert (await agents(broker, lead))["coder"]["transport"] == "tmux"
        agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "-l", "busy 12")
        agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "Enter")
        await agent_pane.wait_for(lambda ls: "busy 12" in ls)
        sent = await send_message(broker.url, lead, "coder", "stuck?", "s-1")

        held = await eventually_async(lambda: _held(agents(broker, lead), "coder"))
        assert held["notices_held"]["reason"] == "the agent is busy (no idle prompt)"
        assert held["notification_attention_required"] is False
        attention = await eventually_async(
            lambda: _flag(agents(broker, lead), "coder", "notification_attention_required")
        )
        # still held: the broker's next retry waits for the pane in its turn
        assert attention["notices_held"] is not None
        assert marked(agent_pane.lines()) == marked(agent_pane.lines())[:1]  # nothing typed
        assert sent in await inbox(broker, configs["coder"].token)  # nothing lost

        # The pane comes back: a retry of the broker types it after all.
        lines = await agent_pane.wait_for(
            lambda ls: any(f"ids {sent} " in line for line in marked(ls)), timeout=40
        )
        first = next(i for i, line in enumerate(lines) if f"ids {sent} " in line)
        assert lines.index("busy 12") < first
        released = await eventually_async(
            lambda: _flag(agents(broker, lead), "coder", "notices_held", want=None)
        )
        assert released["transport"] == "tmux"
    finally:
        await host.close()


async def _flag(listing, name: str, key: str, want=True):
    entry = (await listing)[name]
    return entry if entry[key] == want else None


def _tmux_wrapper(directory: Path, on_enter: str) -> Path:
    """A `tmux` first on PATH (in `directory`) that runs `on_enter`, Python lines with `real`
    (the real tmux) in scope, for an Enter, and is the real tmux for everything else."""
    directory.mkdir()
    wrapper = directory / "tmux"
    real = shutil.which("tmux")
    body = "".join(f"    {line}\n" for line in on_enter.strip().splitlines())
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        f"real = {real!r}\n"
        f"if sys.argv[-1] == 'Enter':\n{body}"
        "os.execv(real, [real, *sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    return directory


def _gated_tmux(directory: Path, gate: Path) -> Path:
    """While `gate` exists, a `tmux` that stops before an Enter (`gate`.reached) and leaves
    without it once its caller died (`gate`.left): a bridge killed between a line and its
    Enter."""
    return _tmux_wrapper(
        directory,
        f"""
if os.path.exists({str(gate)!r}):
    parent = os.getppid()
    open({str(gate)!r} + '.reached', 'w').close()
    while os.getppid() == parent:
        time.sleep(0.05)
    open({str(gate)!r} + '.left', 'w').close()
    sys.exit(1)
""",
    )


def _slow_enter_tmux(directory: Path, seconds: float, pressed: Path) -> Path:
    """A `tmux` that answers an Enter at once and delivers it `seconds` later: a pane whose
    program is slow to show the Enter taken (a loaded machine, a busy TUI). Each Enter asked
    for is a line in `pressed`, written before it is delivered."""
    return _tmux_wrapper(
        directory,
        f"""
with open({str(pressed)!r}, 'a') as pressed:
    pressed.write('Enter\\n')
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep({seconds})
    os.execv(real, [real, *sys.argv[1:]])
sys.exit(0)
""",
    )


async def test_a_bridge_killed_between_the_line_and_enter_is_typed_again_after_restart(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-kill", ["lead", "coder"], tmp_path
    )
    gate = tmp_path / "gate"
    wrapped = _gated_tmux(tmp_path / "bin", gate)
    session = str(uuid.uuid4())

    def bridge(name: str) -> Host:
        return tmux_host(
            configs["coder"].path, agent_pane, tmp_path, name, session=session, tmux_first=wrapped
        )

    first = await bridge("first").start()
    await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
    gate.touch()
    sent = await send_message(module_broker.url, configs["lead"].token, "coder", "x", "k-1")
    await eventually_async(Path(f"{gate}.reached").exists, what="the bridge reaching the Enter")
    await first.kill()
    gate.unlink()
    # The stopped tmux saw its bridge die and left without pressing Enter.
    await eventually_async(Path(f"{gate}.left").exists, what="the Enter left unpressed")
    assert not any(f"ids {sent} " in line for line in agent_pane.lines())  # never submitted
    screen = agent_pane.tmux("capture-pane", "-p", "-t", agent_pane.pane_id)
    assert f"> # pocolobby: 1 new message: ids {sent} " in screen  # typed, waiting for Enter

    second = await bridge("second").start()
    try:
        # The half line is finished as the whole notice it is; the new process's bootstrap
        # names the message again as its backlog (at least once, never lost).
        lines = await agent_pane.wait_for(
            lambda ls: len([line for line in marked(ls) if re.search(f"ids {sent}\\b", line)]) >= 2
        )
        again = [line for line in marked(lines) if re.search(f"ids {sent}\\b", line)]
        assert again[0] == (
            f"# pocolobby: 1 new message: ids {sent} - call get_messages, then acknowledge_messages"
        )
        assert again[1].startswith("# pocolobby: bootstrap: call get_context, then ready")
        assert again[1].endswith(f" - waiting: ids {sent}")
        assert sent in await inbox(module_broker, configs["coder"].token)
    finally:
        await second.close()


async def test_a_pane_slow_to_take_an_enter_gets_no_second_enter(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    """Our own line still in the input just after its Enter is not one left without Enter."""
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-slow-enter", ["lead", "coder"], tmp_path
    )
    pressed = tmp_path / "enters"
    slow = _slow_enter_tmux(tmp_path / "bin", 1.5, pressed)
    host = await tmux_host(configs["coder"].path, agent_pane, tmp_path, tmux_first=slow).start()
    try:
        await eventually_async(  # the bootstrap line typed, its Enter not yet taken
            lambda: (
                "> # pocolobby: bootstrap"
                in agent_pane.tmux("capture-pane", "-p", "-t", agent_pane.pane_id)
            ),
            every=0.05,
        )
        sent = await send_message(module_broker.url, configs["lead"].token, "coder", "x", "s-1")
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        # Every Enter the bridge asked for is written before it is delivered, and a second
        # Enter for the bootstrap line would have been asked for before the next line was.
        assert pressed.read_text().splitlines() == ["Enter", "Enter"]
        assert lines == marked(lines), lines  # no empty line submitted between our two
        assert lines[1].startswith(f"# pocolobby: 1 new message: ids {sent} ")
    finally:
        await host.close()


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
        await eventually_async(lambda: _held(agents(module_broker, lead), "coder"))
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
        lines = await agent_pane.wait_for(
            lambda ls: _typed_ids(marked(ls)[2:]) >= set(sent), timeout=30
        )
        whole = re.compile(
            r"^# pocolobby: (bootstrap: call get_context, then ready with nonce [A-Za-z0-9_-]+"
            r"|\d+ new messages?: ids \d+(,\d+)* - call get_messages, then acknowledge_messages)$"
        )
        assert all(whole.match(line) for line in lines), lines
        assert _typed_ids(marked(lines)[2:]) == set(sent)
    finally:
        for host in reversed(hosts):  # each host's task scopes close in reverse order
            await host.close()


def _typed_ids(lines: list[str]) -> set[int]:
    """The message ids named by the notice lines among `lines`."""
    return {
        int(i)
        for line in marked(lines)
        if "ids " in line
        for i in line.split("ids ")[1].split()[0].split(",")
        if i.isdigit()
    }


async def test_a_channel_agent_and_a_tmux_agent_exchange_messages_and_receipts(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-mixed", ["lead", "coder"], tmp_path
    )
    lead = await Host(configs["lead"].path, str(uuid.uuid4()), tmp_path / "lead.log").start()
    coder = await tmux_host(configs["coder"].path, agent_pane, tmp_path, "coder").start()
    try:
        await lead.bootstrapped()
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        nonce = marked(lines)[0].rsplit("with nonce ", 1)[1]
        await coder.ok("get_context")
        await coder.ok("ready", nonce=nonce)  # what the tmux agent's model does on that line

        # Channel -> tmux, with a read receipt back to the Channel agent.
        asked = await lead.ok(
            "send_message",
            to="coder",
            content="review PR 7",
            client_request_id="m-1",
            notify_when_seen=True,
        )
        ask = asked["message_id"]
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert marked(lines)[1] == (
            f"# pocolobby: 1 new message: ids {ask} - call get_messages, then acknowledge_messages"
        )
        inbox_seen = await coder.ok("get_messages")
        assert [m["content"] for m in inbox_seen["messages"]] == ["review PR 7"]
        await coder.ok("acknowledge_messages", message_ids=[ask])
        receipt = await lead.event(lambda e: e.meta.get("scope") == "receipts")
        assert f"coder saw message {ask} at" in receipt.headline

        # tmux -> Channel, with the receipt typed into the pane.
        answered = await coder.ok(
            "send_message",
            to="lead",
            content="approved",
            client_request_id="m-2",
            reply_to=ask,
            notify_when_seen=True,
        )
        answer = answered["message_id"]
        event = await lead.message_event(answer)
        assert "approved" in event.content
        await lead.ok("acknowledge_messages", message_ids=[answer])
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 3)
        assert marked(lines)[2] == (
            f"# pocolobby: receipts: ids {answer} were read by their recipients"
        )

        # A coordinator tells them apart only by the transport facts.
        listing = await agents(module_broker, configs["lead"].token)
        assert (listing["lead"]["transport"], listing["coder"]["transport"]) == ("channel", "tmux")
        assert listing["coder"]["notices_held"] is None
        assert coder.events == []  # nothing of the tmux agent went to a channel
    finally:
        await coder.close()
        await lead.close()


async def test_a_headless_bridge_types_notices_for_a_shell_agent_that_answers_with_msg(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-headless", ["lead", "shell"], tmp_path
    )
    env = clean_env(
        {"TMUX": f"{agent_pane.socket},0,0", "CLAUDE_CODE_SESSION_ID": str(uuid.uuid4())}
    )
    config = str(configs["shell"].path)
    bridge = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "bridge", "--config", config, "--deliver", "tmux",
         "--pane", agent_pane.pane_id, "--headless"],
        cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        nonce = marked(lines)[0].rsplit("with nonce ", 1)[1]

        def msg(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "pocolobby", "msg", *args, "--config", config],
                cwd=REPO_ROOT, env=clean_env(), capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        ready = await asyncio.to_thread(msg, "ready", nonce)
        assert ready.returncode == 0 and ready.stdout.startswith("ready:"), ready.stderr
        stale = await asyncio.to_thread(msg, "ready", "not-the-nonce")
        assert stale.returncode == 2 and "stale_nonce" in stale.stdout + stale.stderr

        sent = await send_message(module_broker.url, configs["lead"].token, "shell", "hi", "h-1")
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert marked(lines)[1].startswith(f"# pocolobby: 1 new message: ids {sent} ")
        listing = await agents(module_broker, configs["lead"].token)
        assert listing["shell"]["transport"] == "tmux"
        assert listing["shell"]["notification_attention_required"] is False
    finally:
        bridge.terminate()
        code = await asyncio.to_thread(bridge.wait, 20)
        stderr = bridge.stderr.read() if bridge.stderr else ""
    assert code == 0, stderr


async def test_headless_without_a_pane_refuses_to_start(module_broker: Broker, tmp_path: Path):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-headless-none", ["a"], tmp_path
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pocolobby", "bridge", "--config", str(configs["a"].path),
         "--deliver", "tmux", "--headless"],
        cwd=REPO_ROOT, env=clean_env({"TMUX_PANE": ""}), capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "--headless cannot start: --deliver tmux needs a pane" in result.stderr


async def test_the_codex_entry_connect_writes_starts_a_bridge_typing_into_its_pane(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(module_broker.provision, "pane-codex", ["codex"], tmp_path)
    codex_home = tmp_path / "codex-home"
    written = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pocolobby", "connect", "--config", str(configs["codex"].path),
         "--host", "codex"],
        cwd=tmp_path, env=clean_env({"PYTHONPATH": str(REPO_ROOT), "CODEX_HOME": str(codex_home)}),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    entry = tomllib.loads((codex_home / "config.toml").read_text())["mcp_servers"]["pocolobby"]
    # As Codex starts it: the command and args, and only the env_vars it names from the pane.
    passed = {"TMUX": f"{agent_pane.socket},0,0", "TMUX_PANE": agent_pane.pane_id}
    assert set(entry["env_vars"]) == set(passed)
    host = Host(
        configs["codex"].path,
        str(uuid.uuid4()),
        tmp_path / "codex.log",
        extra_env=passed,
        command=[entry["command"], *entry["args"]],
    )
    await host.start()
    try:
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        assert marked(lines)[0].startswith("# pocolobby: bootstrap: call get_context, then ready")
        assert (await host.ok("get_context"))["bridge"]["delivery"]["pane"] == agent_pane.pane_id
    finally:
        await host.close()


def _stretches(broker: Broker, lobby: str, agent_id: str) -> list[tuple[str, str | None]]:
    path = broker.data_dir / "pocolobby.sqlite3"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as db:
        return db.execute(
            "SELECT s.started_at, s.ended_at FROM board_workstretch s "
            "JOIN lobbies_agent a ON a.id = s.agent_id JOIN lobbies_lobby l ON l.id = a.lobby_id "
            "WHERE l.name = ? AND a.agent_id = ? ORDER BY s.started_at",
            (lobby, agent_id),
        ).fetchall()


def _at_prompt(pane: AgentPane) -> bool:
    screen = [line for line in pane.tmux("capture-pane", "-p", "-t", pane.pane_id).splitlines()]
    shown = [line for line in screen if line.strip()]
    return bool(shown) and shown[-1].rstrip() == ">"


async def _prompt_held(pane: AgentPane, seconds: float, timeout: float = 30.0) -> None:
    """Until the pane has shown its prompt, unchanged, for `seconds` (read every 0.1 s)."""
    loop = asyncio.get_running_loop()
    deadline, since = loop.time() + timeout, None
    while loop.time() < deadline:
        if await asyncio.to_thread(_at_prompt, pane):
            since = since if since is not None else loop.time()
            if loop.time() - since >= seconds:
                return
        else:
            since = None
        await asyncio.sleep(0.1)
    raise AssertionError("the pane never rested at its prompt")


async def test_a_pane_busy_then_back_at_its_prompt_is_one_stretch_of_work(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    """A headless bridge reads its pane: busy for 5 s is one turn (start, then end when the
    prompt returns), reported as the hooks report theirs; the typed bootstrap line and a
    1.2 s flicker before it are no turn (debounced: a state counts after 2 s)."""
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-turns", ["lead", "shell"], tmp_path
    )
    env = clean_env(
        {"TMUX": f"{agent_pane.socket},0,0", "CLAUDE_CODE_SESSION_ID": str(uuid.uuid4())}
    )
    bridge = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "bridge", "--config", str(configs["shell"].path),
         "--deliver", "tmux", "--pane", agent_pane.pane_id, "--headless"],
        cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lead = configs["lead"].token
    try:
        await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)  # the bootstrap, typed
        for command in ("busy 1.2", "busy 5"):
            await _prompt_held(agent_pane, 1.5)  # a bridge reading every 0.5 s sees it idle
            agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "-l", command)
            agent_pane.tmux("send-keys", "-t", agent_pane.pane_id, "Enter")
            await agent_pane.wait_for(lambda ls, c=command: c in ls)

        async def working() -> dict | None:
            entry = (await agents(module_broker, lead))["shell"]
            return entry if entry["activity"] == "working" else None

        entry = await eventually_async(working)
        assert entry["host"] == "shell" and entry["transport"] == "tmux"

        async def closed() -> list | None:
            rows = await asyncio.to_thread(_stretches, module_broker, "pane-turns", "shell")
            return rows if rows and rows[-1][1] is not None else None

        rows = await eventually_async(closed, timeout=30)
        assert len(rows) == 1, rows  # no stretch for the bootstrap line or the flicker
        started, ended = (datetime.fromisoformat(t) for t in rows[0])
        assert timedelta(seconds=3.5) <= ended - started <= timedelta(seconds=8), rows
        entry = (await agents(module_broker, lead))["shell"]
        assert entry["activity"] == "working"  # the two minutes after a turn
        assert entry["activity_since"] is not None
    finally:
        bridge.terminate()
        await asyncio.to_thread(bridge.wait, 20)


async def test_a_watching_coordinator_in_tmux_gets_a_typed_activity_line(
    module_broker: Broker, tmp_path: Path, agent_pane: AgentPane
):
    configs = await asyncio.to_thread(
        module_broker.provision, "pane-watch", ["lead", "backend"], tmp_path
    )
    await asyncio.to_thread(
        module_broker.cli_ok, "agent", "permissions", "pane-watch", "lead", "--manage-rooms", "yes"
    )
    backend = configs["backend"].token
    await api(module_broker.url, backend, "POST", "/v1/tools/list_agents", {})  # msg: present
    host = await tmux_host(configs["lead"].path, agent_pane, tmp_path).start()
    try:
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 1)
        await host.ok("ready", nonce=marked(lines)[0].rsplit("with nonce ", 1)[1])
        assert (await host.ok("watch_agents"))["every_agent"] is True
        await api(module_broker.url, backend, "POST", "/v1/turns", {"event": "start"})
        lines = await agent_pane.wait_for(lambda ls: len(marked(ls)) == 2)
        assert marked(lines)[1] == (
            "# pocolobby: activity: backend working - a fact for you, no reply needed "
            "(list_agents has more)"
        )
        assert host.events == []
    finally:
        await host.close()
