"""The bridge process under a real host's habits (issue 13 §7): quit signals, the first tool
list, lines that are not JSON, and a quiet stderr. A real broker subprocess, the bridge as a
real subprocess, the mcp SDK's `ClientSession` as the host (`tests/bridge/host.py`), and a
byte-forwarding proxy (`tests/bridge/proxy.py`) where the test needs to see the wire.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.bridge.host import Host
from tests.bridge.proxy import Proxy
from tests.bridge_client import send_message
from tests.server import REPO_ROOT, AgentConfig, Broker, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


async def provision(broker: Broker, lobby: str, agents: list[str], directory: Path) -> dict:
    return await asyncio.to_thread(broker.provision, lobby, agents, directory)


def through(proxy: Proxy, broker: Broker, config: AgentConfig, directory: Path) -> Path:
    """A copy of the agent's configuration that reaches the broker through `proxy`."""
    path = directory / f"{config.agent}-via-proxy.json"
    path.write_text(config.path.read_text().replace(broker.url, proxy.url))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_quit_signal_closes_the_stream_with_a_close_frame_before_the_process_exits(
    module_broker: Broker, tmp_path: Path, signum: int
):
    lobby = f"quit-{signal.Signals(signum).name.lower()}"
    configs = await provision(module_broker, lobby, ["beta"], tmp_path)
    proxy = await Proxy(module_broker.port).start()
    host = Host(
        through(proxy, module_broker, configs["beta"], tmp_path),
        str(uuid.uuid4()),
        tmp_path / "bridge.log",
    )
    try:
        await host.start()
        await host.bootstrapped()
        assert proxy.closes == []
        sent_at = await host.signal(signum)
        code = await host.exited(timeout=10.0)
        assert code == 0, host.log_text()
        assert host.exited_at is not None
        # The bridge said goodbye on the socket (1001, going away) before it was gone: the
        # broker saw a clean close, not a reset.
        assert [c.code for c in proxy.closes] == [1001], host.log_text()
        assert sent_at < proxy.closes[0].at < host.exited_at
        print(
            f"{signal.Signals(signum).name}: close frame after "
            f"{(proxy.closes[0].at - sent_at) * 1000:.1f} ms, exit after "
            f"{(host.exited_at - sent_at) * 1000:.1f} ms"
        )
        # Generous: a hung shutdown fails here; the 100 ms budget is measured, not asserted.
        assert host.exited_at - sent_at < 5.0
        assert host.log_text() == ""  # a requested quit is nothing wrong
    finally:
        await proxy.close()


async def test_the_first_catalog_sends_no_list_changed_even_when_it_arrives_late(
    module_broker: Broker, tmp_path: Path
):
    """The host's first tools/list waits for the first catalog; telling it the list changed
    while that answer is on its way only makes it list again (and raced the answer)."""
    configs = await provision(module_broker, "firstlist", ["beta"], tmp_path)
    proxy = await Proxy(module_broker.port, delay=0.4).start()  # every answer 400 ms late
    host = Host(
        through(proxy, module_broker, configs["beta"], tmp_path),
        str(uuid.uuid4()),
        tmp_path / "bridge.log",
    )
    try:
        await host.start()
        names = await host.tool_names()
        assert "send_message" in names  # the list waited for the catalog
        await host.bootstrapped()
        await asyncio.sleep(1.0)  # the welcome's catalog request has answered too
        assert host.list_changed == 0
    finally:
        await host.close()
        await proxy.close()


async def test_a_line_that_is_not_json_gets_a_parse_error_and_the_session_carries_on(
    module_broker: Broker, tmp_path: Path
):
    configs = await provision(module_broker, "parse", ["alpha", "beta"], tmp_path)
    host = await Host(configs["beta"].path, str(uuid.uuid4()), tmp_path / "bridge.log").start()
    try:
        await host.bootstrapped()
        await host.send_raw(b"this is not json\n")
        parse_error = await host._wait(lambda: host.wire_errors[:1] or None, 10.0)
        assert parse_error == [
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32700, "message": "Parse error: the line is not JSON"},
            }
        ]
        # JSON that is no JSON-RPC request is answered -32600, with its id when it has one.
        await host.send_raw(b'{"jsonrpc": "2.0", "id": 77, "method": 5}\n')
        invalid = await host._wait(lambda: host.wire_errors[1:2] or None, 10.0)
        assert invalid[0]["id"] == 77 and invalid[0]["error"]["code"] == -32600
        sent = await send_message(module_broker.url, configs["alpha"].token, "beta", "still", "s")
        await host.message_event(sent)  # the bridge kept serving
        assert "send_message" in await host.tool_names()
    finally:
        assert await host.close() == 0


async def test_a_working_session_is_quiet_on_stderr_and_verbose_tells_its_story(
    module_broker: Broker, tmp_path: Path
):
    """Claude Code shows every stderr line of a server as [ERROR]."""
    configs = await provision(module_broker, "quiet", ["alpha", "beta", "gamma"], tmp_path)
    alpha = configs["alpha"].token
    quiet = Host(configs["beta"].path, str(uuid.uuid4()), tmp_path / "quiet.log")
    verbose = Host(
        configs["gamma"].path,
        str(uuid.uuid4()),
        tmp_path / "verbose.log",
        bridge_args=["--verbose"],
    )
    for host, name in ((quiet, "beta"), (verbose, "gamma")):
        await host.start()
        try:
            await host.bootstrapped()
            await host.tool_names()
            sent = await send_message(module_broker.url, alpha, name, "hello", f"q-{name}")
            await host.message_event(sent)
            await host.ok("acknowledge_messages", message_ids=[sent])
        finally:
            assert await host.close() == 0
    assert quiet.log_text() == ""
    story = verbose.log_text()
    assert "connected to" in story and "tool catalog revision" in story
    assert configs["gamma"].token not in story and "hello" not in story


async def test_plain_http_to_another_machine_is_refused_at_start_with_the_fix(tmp_path: Path):
    config = tmp_path / "remote.json"
    config.write_text(
        '{"url": "http://lobby.example:8787", "token": "plt_x", "lobby": "l", "agent": "a"}'
    )
    config.chmod(0o600)
    initialize = (
        '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
        '"2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}\n'
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pocolobby", "bridge", "--config", str(config)],
        input=initialize,
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert "https://" in result.stderr and "SSH tunnel" in result.stderr
    assert "plt_x" not in result.stderr


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_lines_nesting_too_deeply_are_answered_and_the_session_carries_on(
    module_broker: Broker, tmp_path: Path
):
    """Issue 28: a 2 KB line nested 1,024 deep killed the bridge (RecursionError), and a
    request nested 200-800 deep got -32600 "not a JSON-RPC 2.0 message"."""
    configs = await provision(module_broker, "deepline", ["alpha", "beta"], tmp_path)
    host = await Host(configs["beta"].path, str(uuid.uuid4()), tmp_path / "bridge.log").start()
    try:
        await host.bootstrapped()
        bare = nested(1024).encode()
        assert len(bare) == 2048
        await host.send_raw(bare + b"\n")
        first = await host._wait(lambda: host.wire_errors[:1] or None, 10.0)
        assert first == [
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32600,
                    "message": "Invalid Request: the message nests JSON deeper than 68 levels",
                },
            }
        ]
        # A request whose arguments nest too deeply: invalid params, answered to its id.
        for number, depth in enumerate((250, 800, 1500), start=1):
            line = (
                f'{{"jsonrpc": "2.0", "id": "deep-{number}", "method": "tools/call", "params": '
                f'{{"name": "send_message", "arguments": {{"to": {nested(depth)}}}}}}}\n'
            )
            await host.send_raw(line.encode())
            answer = await host._wait(lambda n=number: host.wire_errors[n : n + 1] or None, 10.0)
            assert answer[0]["id"] == f"deep-{number}", answer
            assert answer[0]["error"]["code"] == -32602, answer
            assert "nests JSON deeper than 68 levels" in answer[0]["error"]["message"]
        sent = await send_message(module_broker.url, configs["alpha"].token, "beta", "still", "s")
        await host.message_event(sent)  # the bridge kept serving
        assert "send_message" in await host.tool_names()
        assert host.process is not None and host.process.returncode is None
    finally:
        assert await host.close() == 0
