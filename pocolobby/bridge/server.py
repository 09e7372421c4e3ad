"""The MCP side: a low-level SDK `Server` on stdio, pinned to the initialize-handshake era.

Claude Channels deliver `notifications/claude/channel` only on a connection that negotiated a
handshake protocol version (2025-11-25 and earlier); a connection in the 2026-07-28 per-request
era has no channel for unsolicited notifications. So this server does not use `Server.run`
(which serves both eras and lets the client's first request choose): it drives the SDK's
handshake-only loop (`serve_connection` over a `JSONRPCDispatcher`), which negotiates a
handshake version for any client, and writes its own notifications on the same confirmed
stdout (`host.HostPipe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.runner import serve_connection
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext

from lobbies.wire.terminal import for_terminal
from pocolobby.bridge import SERVER_NAME, bridge_version
from pocolobby.bridge.broker import BrokerClient
from pocolobby.bridge.config import AgentConfig, ConfigError, load_config, loosely_protected
from pocolobby.bridge.config import runtime_for as derive_runtime
from pocolobby.bridge.core import Bridge
from pocolobby.bridge.host import HostPipe
from pocolobby.bridge.link import Link
from pocolobby.bridge.pane import (
    HOLD_SECONDS,
    Pane,
    PaneDelivery,
    PaneError,
    host_of,
    watch_turns,
)
from pocolobby.bridge.tools import instructions_for

log = logging.getLogger("pocolobby.bridge")


class TerminalSafeFormatter(logging.Formatter):
    """Log lines often carry the broker's error messages, which may echo another party's
    text; stderr is a terminal under a headless bridge, so none of it is printed raw."""

    def format(self, record: logging.LogRecord) -> str:
        return for_terminal(super().format(record), multiline=True)


CHANNEL_CAPABILITY = "claude/channel"
# JSON-RPC's range for server-defined errors: the broker refused this process at start.
REFUSED_AT_START = -32000
# Claude Code quits a server with SIGINT and sends SIGTERM ~100 ms later: the socket's close
# frame goes out at once, and the broker's answering close is awaited only this long.
QUIT_CLOSE_SECONDS = 0.02


def build_server(bridge: Bridge) -> Server[Any]:
    """The SDK server: tools/list and tools/call, both answered by `bridge`."""

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        bridge.listing = True
        try:
            if bridge.catalog is None:
                await bridge.wait_for_catalog()
            if bridge.catalog_refused is not None and bridge.stop is None:
                # The broker refused the token itself (a setup fault, learnt without claiming
                # anything): a health check (`claude mcp list`) shows "tools fetch failed" and
                # this sentence. A refusal of the stream (another conversation holds the agent)
                # is no fault of the setup: the tools are listed, each saying it.
                raise MCPError(REFUSED_AT_START, bridge.refusal(bridge.catalog_refused))
            return types.ListToolsResult(tools=bridge.tools())
        finally:
            bridge.listing = False

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await bridge.call_tool(params.name, params.arguments)

    server: Server[Any] = Server(
        SERVER_NAME,
        version=bridge_version(),
        title="PocoLobby",
        instructions=instructions_for(
            bridge.tmux_delivery, pushes_off=bridge.pane_problem is not None
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.middleware = []  # no tracing spans in a stdio bridge
    return server


def initialization_options(server: Server[Any]) -> Any:
    return server.create_initialization_options(
        NotificationOptions(tools_changed=True),
        experimental_capabilities={CHANNEL_CAPABILITY: {}},
    )


async def serve(
    config: AgentConfig,
    pane: Pane | None = None,
    *,
    pane_problem: str | None = None,
    hold_seconds: float = HOLD_SECONDS,
) -> int:
    """Serve one host over stdio until it closes stdin."""
    runtime = derive_runtime(config.token)
    if runtime.scope == "process":
        log.warning(
            "CLAUDE_CODE_SESSION_ID is not set: runtime %s belongs to this process only, so a "
            "restart will need `pocolobby agent reset-runtime %s %s`",
            runtime.runtime_id,
            config.lobby,
            config.agent,
        )
    else:
        log.info("runtime %s derived from this conversation", runtime.runtime_id)
    if loosely_protected(config.path):
        log.warning("%s can be read by other users; chmod 600 it", config.path)

    host = await HostPipe.open_stdio()
    broker = BrokerClient(config.url, config.token, runtime.runtime_id)
    bridge = Bridge(config, runtime, host, broker)
    if pane is not None:
        bridge.pane = PaneDelivery(pane, hold_seconds, on_change=bridge.report_delivery)
    bridge.pane_problem = pane_problem
    server = build_server(bridge)
    feed, read_stream, write_stream = host.streams()
    dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
        read_stream, write_stream, inline_methods=frozenset({"initialize"})
    )
    connection = Connection.for_loop(dispatcher)

    link = Link(bridge, config.token)
    quit_requested = asyncio.Event()
    bridge.request_catalog()

    async def turns_from_the_pane() -> None:
        # Claude Code's hooks report its turns; any other host's turns are read off its pane.
        await connection.initialized.wait()
        params = connection.client_params
        host_name = host_of(params.client_info.name if params is not None else None)
        if pane is not None and host_name != "claude-code":
            await watch_turns(pane, functools.partial(bridge.report_turn, host_name))

    async def link_once_a_session() -> None:
        # Claude Code listens for channel events only once it has the tool list, and a health
        # check lists tools then quits: the agent is claimed (and its bootstrap pushed) only
        # by a host still there after that (docs/DECISIONS.md, "The bridge under a real host").
        await connection.initialized.wait()
        await bridge.until_a_session()
        log.info("the host is a session: connecting to the broker")
        await link.run()

    async def quit_on_signal(tasks: anyio.abc.TaskGroup) -> None:
        await quit_requested.wait()
        await link.close(QUIT_CLOSE_SECONDS)
        tasks.cancel_scope.cancel()

    loop = asyncio.get_running_loop()
    try:
        async with anyio.create_task_group() as tasks:

            def on_signal(signum: int) -> None:
                if quit_requested.is_set():  # a second signal: leave without waiting
                    tasks.cancel_scope.cancel()
                    return
                log.info("%s: closing the stream and exiting", signal.Signals(signum).name)
                quit_requested.set()

            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, on_signal, signum)
            tasks.start_soon(host.pump, feed)
            tasks.start_soon(link_once_a_session)
            tasks.start_soon(turns_from_the_pane)
            tasks.start_soon(quit_on_signal, tasks)
            await serve_connection(
                server,
                dispatcher,
                connection=connection,
                lifespan_state={},
                init_options=initialization_options(server),
            )
            log.info("the host closed the connection; exiting")
            await link.close(QUIT_CLOSE_SECONDS)
            tasks.cancel_scope.cancel()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        host.close()
        with contextlib.suppress(Exception):
            await broker.aclose()
    return 0


async def serve_headless(
    config: AgentConfig, pane: Pane, *, hold_seconds: float = HOLD_SECONDS
) -> int:
    """`--headless`: the stream and the pane only, no MCP host, for an agent that has no MCP
    client and uses `pocolobby msg`; runs until SIGINT/SIGTERM (0) or a refusal (1)."""
    runtime = derive_runtime(config.token)
    if runtime.scope == "process":
        log.warning(
            "CLAUDE_CODE_SESSION_ID is not set: runtime %s belongs to this process only; set it "
            "to a fixed UUID for this agent to keep the runtime across restarts",
            runtime.runtime_id,
        )
    # No host: a pipe that is closed from the start, so the bridge's host writes are no-ops.
    host = HostPipe(open(os.devnull, "rb"), open(os.devnull, "wb"))  # noqa: SIM115
    host.close()
    broker = BrokerClient(config.url, config.token, runtime.runtime_id)
    bridge = Bridge(config, runtime, host, broker)
    bridge.pane = PaneDelivery(pane, hold_seconds, on_change=bridge.report_delivery)
    link = Link(bridge, config.token)
    quit_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, quit_requested.set)
    stream = asyncio.ensure_future(link.run())
    turns = asyncio.ensure_future(
        watch_turns(pane, functools.partial(bridge.report_turn, host_of(None, headless=True)))
    )
    waiter = asyncio.ensure_future(quit_requested.wait())
    try:
        await asyncio.wait({stream, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await link.close(QUIT_CLOSE_SECONDS)
        for task in (stream, turns, waiter):
            task.cancel()
        with contextlib.suppress(Exception):
            await broker.aclose()
    return 1 if bridge.stop is not None else 0


def main(
    config_path: str,
    *,
    verbose: bool = False,
    deliver: str = "channel",
    pane: str | None = None,
    hold_seconds: float = HOLD_SECONDS,
    headless: bool = False,
    tmux_socket: str | None = None,
    idle_after: float | None = None,
) -> int:
    """`pocolobby bridge --config FILE`: serve, exit 0 when the host leaves or signals.

    Claude Code shows every stderr line of a server as an error, so only what is wrong is
    logged unless `--verbose` asks for the connection's story too. With `--deliver tmux` and
    no usable pane the bridge still serves its tools (the agent can poll); it says why on
    stderr, in every tool's description and in get_context, and types nothing.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        TerminalSafeFormatter("%(asctime)s pocolobby-bridge %(levelname)s %(message)s")
    )
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    for noisy in ("httpx", "httpcore", "websockets", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"pocolobby bridge: {for_terminal(exc)}", file=sys.stderr)
        return 1
    if not 0 < hold_seconds <= 86400:
        print("pocolobby bridge: --hold-seconds must be above 0 and at most 86400", file=sys.stderr)
        return 1
    if idle_after is not None and not 0 < idle_after < hold_seconds:
        print(
            "pocolobby bridge: --idle-after must be above 0 and below --hold-seconds "
            f"({hold_seconds:g})",
            file=sys.stderr,
        )
        return 1
    if deliver != "tmux" and (tmux_socket is not None or idle_after is not None or headless):
        print(
            "pocolobby bridge: --tmux-socket, --idle-after and --headless need --deliver tmux",
            file=sys.stderr,
        )
        return 1
    target: Pane | None = None
    problem: str | None = None
    if deliver == "tmux":
        try:
            target = Pane.from_environment(pane, tmux_socket=tmux_socket, idle_after=idle_after)
            asyncio.run(target.check())
        except PaneError as exc:
            target, problem = None, str(exc)
        if problem is not None and not headless:
            print(
                f"pocolobby bridge: {for_terminal(problem)}. Pushes are off: nothing will be "
                "typed, the broker keeps messages pending, and the agent can read them with "
                "get_messages.",
                file=sys.stderr,
            )
    if headless:
        if target is None:  # no tools to say it in: refuse, saying what is missing
            print(f"pocolobby bridge: --headless cannot start: {problem}", file=sys.stderr)
            return 1
        return asyncio.run(serve_headless(config, target, hold_seconds=hold_seconds))
    try:
        code = asyncio.run(serve(config, target, pane_problem=problem, hold_seconds=hold_seconds))
    except KeyboardInterrupt:  # a signal before the handlers were installed
        code = 0
    # Everything is written and closed. The interpreter's own teardown (the SDK's many models)
    # takes longer than the host waits between SIGINT and SIGTERM (docs/PERFORMANCE.md, "Figures
    # from code comments").
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)
