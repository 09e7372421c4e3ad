"""Line programs and tmux servers (issue 31): real programs in real tmux panes, each reached by
a real headless bridge (`pocolobby bridge --deliver tmux --headless`) of a real broker."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pocolobby.bridge.pane import MARKER, is_idle
from tests.bridge_client import api, send_message
from tests.eventually import eventually_async
from tests.server import REPO_ROOT, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
IPYTHON = Path(sys.executable).with_name("ipython")


class Server:
    """A private tmux server: `tmux -S socket` or, with `name`, `tmux -L name` under
    `tmpdir` (TMUX_TMPDIR), as a user's second server would be."""

    def __init__(self, tmpdir: Path, name: str | None = None) -> None:
        self.tmpdir = tmpdir
        self.name = name
        self.env = {**os.environ, "TMUX_TMPDIR": str(tmpdir)}
        self.env.pop("TMUX", None)
        self.socket = (
            tmpdir / f"tmux-{os.getuid()}" / name if name else tmpdir / f"s-{uuid.uuid4().hex[:6]}"
        )

    def tmux(self, *args: str) -> str:
        where = ["-L", self.name] if self.name else ["-S", str(self.socket)]
        return subprocess.run(
            ["tmux", *where, *args],
            capture_output=True, text=True, check=True, timeout=10, env=self.env,
        ).stdout  # fmt: skip

    def start(self, command: str) -> str:
        """A new window running `command` (in `cwd` REPO_ROOT); its pane id."""
        args = ["-d", "-P", "-F", "#{pane_id}", "-x", "160", "-y", "40", "-c", str(REPO_ROOT)]
        if not self.socket.exists():
            return self.tmux("new-session", *args, command).strip()
        return self.tmux("new-window", *args[:4], "-c", str(REPO_ROOT), command).strip()

    def screen(self, pane: str) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", pane)

    def kill(self) -> None:
        if self.socket.exists():
            subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], check=False, timeout=10)


@pytest.fixture
def server() -> Iterator[Server]:
    tmpdir = Path(f"/tmp/pl-{uuid.uuid4().hex[:8]}")  # short: a socket path has a length limit
    tmpdir.mkdir(mode=0o700)
    started = Server(tmpdir)
    yield started
    started.kill()
    shutil.rmtree(tmpdir, ignore_errors=True)


@contextmanager
def headless(config: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Path]:
    """A headless bridge typing into a pane; yields its stderr log."""
    log = config.with_suffix(f".{uuid.uuid4().hex[:6]}.log")
    extra = {"TMUX": "", "TMUX_PANE": "", "CLAUDE_CODE_SESSION_ID": str(uuid.uuid4())}
    with log.open("w") as err:
        bridge = subprocess.Popen(
            [sys.executable, "-m", "pocolobby", "bridge", "--config", str(config), "--deliver",
             "tmux", "--headless", *args],
            cwd=REPO_ROOT, env=clean_env({**extra, **(env or {})}), stdin=subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
        try:
            yield log
        finally:
            bridge.terminate()
            bridge.wait(20)


async def until_screen(server: Server, pane: str, predicate, timeout: float = 20.0) -> str:
    """The pane's screen once `predicate` holds for it."""
    return await eventually_async(
        lambda: screen if predicate(screen := server.screen(pane)) else None,
        timeout=timeout,
        every=0.2,
        what=lambda: f"the pane matching:\n{server.screen(pane)}",
    )


def submitted(text: str):
    """`text` on the screen and the program's prompt back after it (the Enter reached the
    program: the line was submitted, not left in its input)."""

    def check(screen: str) -> bool:
        return text in screen and is_idle(screen)

    return check


PROGRAMS = {
    "python3 -i": f"{sys.executable} -i -q",
    "ipython": f"{IPYTHON} --no-banner --no-confirm-exit --HistoryManager.enabled=False",
    "node": "node",
    "bash": "bash --norc --noprofile",
}


@pytest.mark.parametrize("program", list(PROGRAMS))
async def test_a_line_program_at_its_empty_prompt_receives_notices(
    module_broker: Broker, tmp_path: Path, server: Server, program: str
):
    if program == "ipython" and not IPYTHON.exists():
        pytest.skip("IPython is not installed in this venv (pip install ipython)")
    if program == "node" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    lobby = f"programs-{program.split()[0].replace('3', '')}"
    configs = await asyncio.to_thread(module_broker.provision, lobby, ["lead", "repl"], tmp_path)
    pane = server.start(PROGRAMS[program])
    await until_screen(server, pane, is_idle)
    with headless(configs["repl"].path, "--pane", pane, "--tmux-socket", str(server.socket)):
        await until_screen(server, pane, submitted(f"{MARKER} bootstrap"))
        sent = await send_message(module_broker.url, configs["lead"].token, "repl", "hi", "r-1")
        await until_screen(server, pane, submitted(f"{MARKER} 1 new message: ids {sent} "))


async def test_a_program_without_a_prompt_receives_a_notice_only_with_idle_after(
    module_broker: Broker, tmp_path: Path, server: Server
):
    configs = await asyncio.to_thread(module_broker.provision, "programs-cat", ["cat"], tmp_path)
    pane = server.start("cat")
    target = ["--pane", pane, "--tmux-socket", str(server.socket)]
    with headless(configs["cat"].path, *target, "--hold-seconds", "60"):

        async def held() -> dict | None:
            listed = await api(
                module_broker.url, configs["cat"].token, "POST", "/v1/tools/list_agents", {}
            )
            return {a["agent_id"]: a for a in listed["agents"]}["cat"]["notices_held"]

        reason = (await eventually_async(held, what="the bootstrap reported held"))["reason"]
        assert reason == "the agent is busy (no idle prompt)"
        assert MARKER not in server.screen(pane)  # held: no prompt, no opt-in
    started = time.monotonic()
    with headless(configs["cat"].path, *target, "--idle-after", "1.5"):
        screen = await until_screen(server, pane, lambda s: MARKER in s)
    assert time.monotonic() - started >= 1.5  # not before the quiet period
    assert "bootstrap" in screen


async def test_a_pane_on_a_named_tmux_server_is_found_without_being_told_which(
    module_broker: Broker, tmp_path: Path, server: Server
):
    named = Server(server.tmpdir, f"work-{uuid.uuid4().hex[:6]}")
    try:
        pane = named.start("bash --norc --noprofile")
        while _on_other_servers(pane, server.tmpdir):  # make its id unique among the user's
            pane = named.start("bash --norc --noprofile")
        await until_screen(named, pane, is_idle)
        configs = await asyncio.to_thread(
            module_broker.provision, "programs-named", ["lead", "sh"], tmp_path
        )
        env = {"TMUX_TMPDIR": str(server.tmpdir)}
        with headless(configs["sh"].path, "--pane", pane, env=env):
            await until_screen(named, pane, submitted(f"{MARKER} bootstrap"))
        named.tmux("send-keys", "-t", pane, "clear", "Enter")
        await until_screen(named, pane, lambda s: MARKER not in s and is_idle(s))
        # --tmux-socket NAME picks the server as `tmux -L NAME` does
        name = named.name or ""
        with headless(configs["sh"].path, "--pane", pane, "--tmux-socket", name, env=env):
            await until_screen(named, pane, submitted(f"{MARKER} bootstrap"))
    finally:
        named.kill()


def _on_other_servers(pane: str, tmpdir: Path) -> bool:
    """Whether any server of this user in /tmp already has a pane with this id."""
    folder = Path(f"/tmp/tmux-{os.getuid()}")
    for socket in folder.iterdir() if folder.is_dir() else []:
        listed = subprocess.run(
            ["tmux", "-S", str(socket), "list-panes", "-a", "-F", "#{pane_id}"],
            capture_output=True, text=True, check=False, timeout=10,
        )  # fmt: skip
        if pane in listed.stdout.split():
            return True
    return False


def run_bridge(config: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    extra = {"TMUX": "", "TMUX_PANE": "", **env}
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "bridge", "--config", str(config), "--deliver",
         "tmux", "--headless", *args],
        cwd=REPO_ROOT, env=clean_env(extra), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip


async def test_errors_name_the_tmux_servers_tried_and_an_ambiguous_pane_is_refused(
    module_broker: Broker, tmp_path: Path, server: Server
):
    configs = await asyncio.to_thread(module_broker.provision, "programs-errors", ["a"], tmp_path)
    config = configs["a"].path
    first = Server(server.tmpdir, "one")
    second = Server(server.tmpdir, "two")
    try:
        pane = first.start("cat")
        assert second.start("cat") == pane  # each server numbers its own panes from %0
        env = {"TMUX_TMPDIR": str(server.tmpdir)}
        both = await asyncio.to_thread(run_bridge, config, "--pane", pane, env=env)
        assert both.returncode == 1
        assert f"pane {pane} is on 2 tmux servers" in both.stderr
        assert str(first.socket) in both.stderr and str(second.socket) in both.stderr
        assert "--tmux-socket" in both.stderr and "Traceback" not in both.stderr

        gone = await asyncio.to_thread(run_bridge, config, "--pane", "%987654", env=env)
        assert "pane %987654 is on none of your tmux servers (tried: " in gone.stderr
        assert str(first.socket) in gone.stderr

        wrong = await asyncio.to_thread(
            run_bridge, config, "--pane", "%987654", "--tmux-socket", "two", env=env
        )
        assert f"tmux display-message -t %987654 on {second.socket}: " in wrong.stderr

        absent = await asyncio.to_thread(
            run_bridge, config, "--pane", pane, "--tmux-socket", "nosuch", env=env
        )
        assert f"on {server.tmpdir}/tmux-{os.getuid()}/nosuch: " in absent.stderr
        assert "--headless cannot start: " in absent.stderr
    finally:
        first.kill()
        second.kill()


async def test_headless_says_what_is_missing(module_broker: Broker, tmp_path: Path):
    configs = await asyncio.to_thread(module_broker.provision, "programs-missing", ["a"], tmp_path)
    config = configs["a"].path
    no_pane = await asyncio.to_thread(run_bridge, config, env={})
    assert no_pane.returncode == 1
    assert "--headless cannot start: --deliver tmux needs a pane" in no_pane.stderr
    no_tmux = await asyncio.to_thread(
        run_bridge, config, "--pane", "%1", env={"PATH": str(Path(sys.executable).parent)}
    )
    assert "--headless cannot start: --deliver tmux: tmux is not installed" in no_tmux.stderr
    channel = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pocolobby", "bridge", "--config", str(config), "--headless"],
        cwd=REPO_ROOT, env=clean_env(), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert channel.returncode == 1 and "need --deliver tmux" in channel.stderr
    bad = await asyncio.to_thread(run_bridge, config, "--pane", "%1", "--idle-after", "0", env={})
    assert bad.returncode == 1 and "--idle-after must be above 0" in bad.stderr
