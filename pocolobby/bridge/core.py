"""The bridge's state and behaviour: tools, pushes to the host, the catalog and the runtime.

One `Bridge` per process. The WebSocket loop (`link.py`) feeds it welcomes and notices; the
MCP server (`server.py`) asks it for the tool list and runs tool calls through it. Nothing
here raises into the host: every failure becomes a tool result that says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from lobbies.wire import (
    EVENT_VERSION,
    FRAME_DELIVERY,
    FRAME_HOST_WRITTEN,
    FRAME_RECEIVED,
    HELD_REASON_CHARS,
    PARSE_DEPTH,
    TRANSPORT_CHANNEL,
    TRANSPORT_TMUX,
    load_json,
)
from pocolobby.bridge import attachments, bridge_version
from pocolobby.bridge.broker import BrokerClient, Outcome
from pocolobby.bridge.catalog import TOOL_NAME, Catalog, CatalogError, compare, local_guide
from pocolobby.bridge.config import AgentConfig, Runtime
from pocolobby.bridge.files import FileRefused, Places
from pocolobby.bridge.host import HostGone, HostPipe
from pocolobby.bridge.pane import PaneDelivery, notice_line
from pocolobby.bridge.results import (
    Stop,
    as_text,
    failure,
    render,
    retry_advice,
    stopped_text,
    success,
)
from pocolobby.bridge.tools import OWN_NAMES, OWN_TOOLS

log = logging.getLogger("pocolobby.bridge")

CHANNEL_METHOD = "notifications/claude/channel"
META_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# How long a tool call waits for a first connection before saying it was not sent.
LINK_WAIT_SECONDS = 5.0
# How long tools/list waits for the first catalog before listing only the bridge's tools.
CATALOG_WAIT_SECONDS = 5.0
CATALOG_RETRY_DELAYS = (1.0, 2.0, 5.0, 15.0, 30.0)
# A host that is still there this long after its handshake (and its first tools/list) is a
# session, not a health check: only then is the agent's runtime claimed (see DECISIONS.md).
CLAIM_AFTER_SECONDS = 1.0
# The bootstrap is offered again after these pauses until `ready` echoes its nonce: a host may
# drop an event that arrives before it listens, and a model may miss one.
BOOTSTRAP_REPEAT_DELAYS = (3.0, 6.0, 12.0, 24.0, 48.0)
CONTEXT_FIRST_HINT = "If this session has not called get_context yet, call it first."
CONTEXT_FIRST = (
    "PocoLobby: this session has not loaded its context yet. Call get_context first (your "
    "role, checkpoint and inbox), then ready with the bootstrap nonce it shows."
)

SendFrame = Callable[[dict[str, Any]], Awaitable[None]]
ToolHandler = Callable[[dict[str, Any]], Awaitable[types.CallToolResult]]


def clean_meta(raw: Any) -> dict[str, str]:
    """Channel attributes: identifier keys with string values only; anything else is dropped."""
    if not isinstance(raw, dict):
        return {}
    return {
        k: v
        for k, v in raw.items()
        if isinstance(k, str) and META_KEY.match(k) and isinstance(v, str)
    }


def _payload(content: str) -> dict[str, Any]:
    """The JSON object after a notice's headline, or {} when there is none."""
    _, _, rest = content.partition("\n")
    try:
        payload = load_json(rest, PARSE_DEPTH, "the notice")
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


class Bridge:
    """Everything one bridge process knows and does; see the module docstring."""

    def __init__(
        self, config: AgentConfig, runtime: Runtime, host: HostPipe, broker: BrokerClient
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.host = host
        self.broker = broker
        # The stream.
        self.state = "starting"  # starting, connected, reconnecting, stopped
        self.stop: Stop | None = None
        self.welcomed = False  # some connection of this process was accepted
        self.last_error: str | None = None
        self.linked = asyncio.Event()  # a generation is known, or the stream stopped
        # The first connection attempt ended somehow (welcome, refusal or failure).
        self.link_attempted = asyncio.Event()
        self.agent_id = config.agent
        self.lobby_id = config.lobby
        # Continuity in this process.
        self.acknowledged: set[int] = set()
        self.echoed_nonces: set[str] = set()
        self.ready_generation: int | None = None
        self.context_loaded = False  # get_context answered in this process
        # The latest bootstrap offered to the host (nonce, channel params) and its repeats.
        self.bootstrap_offer: tuple[str, dict[str, Any]] | None = None
        self._context_calls = 0
        self._repeater: asyncio.Task[None] | None = None
        self._repeater_nonce: str | None = None
        # The host's signs of a session (see until_a_session).
        self.listing = False  # a tools/list is being answered
        self.tool_called = asyncio.Event()
        # The catalog.
        self.catalog: Catalog | None = None
        self.catalog_error: str | None = None
        self.catalog_attempted = asyncio.Event()
        # The broker refused the token when the catalog was asked for (401/403).
        self.catalog_refused: Stop | None = None
        self.seen_catalog: Catalog | None = None  # what the model was last shown
        # (catalog revision, refusal code) of the last tool list the host was answered; None
        # before the first list, and again once the host was told that list changed.
        self.listed_as: tuple[str | None, str | None] | None = None
        # Set by the stream: drop the socket and reconnect with our generation, to learn why.
        self.recheck: Callable[[], None] | None = None
        self._loader: asyncio.Task[None] | None = None
        self._catalog_wanted = False
        self._wake_loader = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Set for `--deliver tmux`: notices are typed into this pane instead of the channel.
        self.pane: PaneDelivery | None = None
        # `--deliver tmux` without a usable pane (unset, gone, no tmux): nothing is delivered,
        # the broker keeps every message pending, and the tools say why.
        self.pane_problem: str | None = None
        # The current socket's frame sender while one is open (set by the stream).
        self.send_frame: SendFrame | None = None
        self._handlers: dict[str, ToolHandler] = {
            "acknowledge_messages": self._acknowledge_messages,
            "get_context": self._get_context,
            "save_checkpoint": self._save_checkpoint,
            "ready": self._ready,
            "list_operations": self._list_operations,
            "call_operation": self._call_operation,
            "get_attachment": self._get_attachment,
        }

    @property
    def generation(self) -> int | None:
        return self.broker.generation

    def refusal(self, stop: Stop | None = None) -> str:
        """One sentence for the host's tool view: the refusal, then the fix."""
        stop = stop or self.stop
        if stop is None:
            return ""
        said = stopped_text(stop, self.agent_id, self.lobby_id)
        return f"PocoLobby refused this session ({stop.status} {stop.code}): {said}"

    @property
    def bootstrap_complete(self) -> bool:
        return self.generation is not None and self.ready_generation == self.generation

    def spawn(self, coroutine: Awaitable[Any]) -> None:
        """Run a background task that is kept referenced until it ends."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ the stream's events

    def end_wait(self) -> bool:
        """Forget the refusal of a wait for a hand over (admitted, or refused for another
        reason now); True when this process was waiting."""
        if self.stop is None or self.stop.code != "runtime_conflict" or self.welcomed:
            return False
        self.stop = None
        self.state = "starting"
        return True

    def on_welcome(self, frame: dict[str, Any]) -> None:
        generation = frame.get("generation")
        if not isinstance(generation, int):
            log.warning("the broker's welcome has no generation; ignoring it")
            return
        if self.end_wait():  # handed over: the tools work now, and a bootstrap follows
            log.info("admitted: this conversation now holds the agent")
            self.spawn(self._tools_work_now())
        if frame.get("runtime_id") not in (None, self.runtime.runtime_id):
            log.warning("the broker's welcome names another runtime id")
        self.broker.generation = generation
        self.welcomed = True
        self.agent_id = str(frame.get("agent_id") or self.agent_id)
        self.lobby_id = str(frame.get("lobby_id") or self.lobby_id)
        self.state = "connected"
        self.last_error = None
        self.linked.set()
        self.link_attempted.set()
        log.info(
            "connected to %s as %s/%s, generation %s%s",
            self.config.url,
            self.lobby_id,
            self.agent_id,
            generation,
            " (new process: bootstrap follows)" if frame.get("bootstrap") else "",
        )
        self.request_catalog()

    async def _tools_work_now(self) -> None:
        """After a wait: the host's tool list failed or said "refused", so it lists again."""
        self.listed_as = None
        with contextlib.suppress(HostGone):
            await self.host.notify("notifications/tools/list_changed")

    def on_disconnect(self, reason: str) -> None:
        if self.stop is None:
            self.state = "reconnecting"
            self.last_error = reason
        self.link_attempted.set()

    async def on_stop(self, stop: Stop) -> None:
        """The broker refused this process for good: stop and tell the session once."""
        if self.stop is not None:
            return
        self.stop = stop
        self.state = "stopped"
        self.linked.set()
        self.link_attempted.set()
        # The one stderr line of a refusal: the host shows it, so it carries the fix.
        log.error(
            "not connected to PocoLobby (%s %s): %s", stop.status, stop.code, self.stopped_text()
        )
        meta = {
            "priority": "important",
            "scope": "notice",
            "agent_id": self.agent_id,
            "lobby_id": self.lobby_id,
        }
        payload = {"stopped": {"code": stop.code, "status": stop.status}}
        content = f"{self.stopped_sentence()}\n{as_text(payload)}"
        with contextlib.suppress(HostGone):
            await self.host.notify(CHANNEL_METHOD, {"content": content, "meta": meta})
        await self.announce_list_change()

    def catalog_announced(self, revision: Any) -> None:
        if (
            not isinstance(revision, str)
            or self.catalog is None
            or (revision != self.catalog.revision)
        ):
            self.request_catalog()

    async def on_notice(self, frame: dict[str, Any], send: SendFrame) -> None:
        """Receipt, filter, write to the host, and confirm the write to the broker."""
        notice_id = frame.get("notice_id")
        if not isinstance(notice_id, str):
            log.warning("ignored a notice without a notice_id")
            return
        await send({"type": FRAME_RECEIVED, "notice_id": notice_id})
        kind = frame.get("notice_kind")
        content = frame.get("content")
        if not isinstance(content, str):
            log.warning("ignored notice %s without content", notice_id)
            return
        raw_ids = frame.get("message_ids")
        ids = [i for i in raw_ids if isinstance(i, int)] if isinstance(raw_ids, list) else []
        if kind == "bootstrap":
            nonce = _payload(content).get("nonce")
            if isinstance(nonce, str) and nonce in self.echoed_nonces:
                log.info("dropped bootstrap notice %s: its nonce was already echoed", notice_id)
                return
        elif kind in ("messages", "hint") and ids and all(i in self.acknowledged for i in ids):
            log.info(
                "dropped %s notice %s: this session acknowledged its messages", kind, notice_id
            )
            return
        if self.pane_problem is not None:
            log.warning("notice %s not delivered: %s", notice_id, self.pane_problem)
            return
        if self.pane is not None:
            nonce = _payload(content).get("nonce") if kind == "bootstrap" else None
            line = notice_line(str(kind), ids, nonce if isinstance(nonce, str) else None)
            # Held notices wait for an idle prompt; the stream keeps reading meanwhile.
            self.spawn(self._type_notice(self.pane, notice_id, line, send, str(kind), ids))
            return
        note, shown = (None, None) if kind == "bootstrap" else self._catalog_note()
        text = content if note is None else f"{content}\n\n{note}"
        if kind == "messages" and (named := attachments.attachments_note(_payload(content))):
            text = f"{text}\n\n{named}"
        params = {"content": text, "meta": clean_meta(frame.get("meta"))}
        try:
            await self.host.notify(CHANNEL_METHOD, params)
        except HostGone:
            log.warning("the host closed stdout; notice %s was not written", notice_id)
            return
        if kind == "bootstrap":
            nonce = _payload(content).get("nonce")
            if isinstance(nonce, str):
                self.offer_bootstrap_again(nonce, params)
            self.seen_catalog = self.catalog
        elif shown is not None:
            self.seen_catalog = shown
        await send({"type": FRAME_HOST_WRITTEN, "notice_id": notice_id})

    def offer_bootstrap_again(self, nonce: str, params: dict[str, Any]) -> None:
        """Repeat this bootstrap, identical, until `ready` echoes its nonce (or the bounded
        schedule ends, the host leaves, or the broker stops this process)."""
        self.bootstrap_offer = (nonce, params)
        if self._repeater is not None and not self._repeater.done():
            if self._repeater_nonce == nonce:
                return  # the broker sent it again: the schedule already runs
            self._repeater.cancel()
        self._repeater_nonce = nonce
        self._repeater = asyncio.ensure_future(self._repeat_bootstrap(nonce, params))

    def _bootstrap_answered(self, nonce: str) -> bool:
        return (
            nonce in self.echoed_nonces
            or self.stop is not None
            or (self.bootstrap_offer is not None and self.bootstrap_offer[0] != nonce)
        )

    async def _repeat_bootstrap(self, nonce: str, params: dict[str, Any]) -> None:
        calls = self._context_calls
        for attempt, delay in enumerate(BOOTSTRAP_REPEAT_DELAYS, start=2):
            await asyncio.sleep(delay)
            if self._bootstrap_answered(nonce):
                return
            if self._context_calls != calls:
                calls = self._context_calls  # the model is acting on it: give it time
                continue
            try:
                await self.host.notify(CHANNEL_METHOD, params)
            except HostGone:
                return
            log.info("offered bootstrap %s again (offer %d): no ready for it yet", nonce, attempt)

    async def _type_notice(
        self,
        pane: PaneDelivery,
        notice_id: str,
        line: str,
        send: SendFrame,
        kind: str,
        ids: list[int],
    ) -> None:
        """Type the notice's line; host_written only once the line and Enter were typed."""

        def wanted() -> bool:  # messages this session acknowledged while the line was held
            return kind not in ("messages", "hint") or not ids or not self.acknowledged >= set(ids)

        result = await pane.deliver(line, wanted)
        if result == "dropped":
            log.info("dropped notice %s: its messages were acknowledged while held", notice_id)
            return
        if result != "typed":
            log.warning("notice %s was not typed into the pane: %s", notice_id, pane.last_error)
            return
        try:
            await send({"type": FRAME_HOST_WRITTEN, "notice_id": notice_id})
        except Exception as exc:  # the socket closed: the broker re-pushes; typed twice is fine
            log.warning("notice %s typed but not confirmed: %s", notice_id, exc)

    @property
    def tmux_delivery(self) -> bool:
        return self.pane is not None or self.pane_problem is not None

    def delivery_frame(self, attention: bool = False) -> dict[str, Any]:
        """This process's delivery facts for the broker (see lobbies.wire.FRAME_DELIVERY)."""
        if not self.tmux_delivery:
            return {"type": FRAME_DELIVERY, "transport": TRANSPORT_CHANNEL, "held": False}
        reason = self.pane_problem or (self.pane.held_reason if self.pane else None)
        return {
            "type": FRAME_DELIVERY,
            "transport": TRANSPORT_TMUX,
            "held": reason is not None,
            "held_reason": (reason or "")[:HELD_REASON_CHARS],
            "attention": attention,
        }

    def report_delivery(self, attention: bool = False) -> None:
        """Send the delivery facts on the current socket; a reconnect reports them again."""
        send = self.send_frame
        if send is None or not self.tmux_delivery:
            return
        frame = self.delivery_frame(attention)

        async def report() -> None:
            try:
                await send(frame)
            except Exception as exc:  # the socket closed: the next welcome reports again
                log.info("delivery facts not reported: %s", exc)

        self.spawn(report())

    def _catalog_note(self) -> tuple[str | None, Catalog | None]:
        """Once per new revision after bootstrap: what it adds, if the model has not seen it."""
        current, seen = self.catalog, self.seen_catalog
        if not self.bootstrap_complete or current is None:
            return None, None
        if seen is None:
            self.seen_catalog = current
            return None, None
        if seen.revision == current.revision:
            return None, None
        change = compare(seen, current)
        if not change:
            self.seen_catalog = current  # wording only: nothing the model needs
            return None, None
        return change.sentence(), current

    # ------------------------------------------------------------ the catalog

    def request_catalog(self) -> None:
        """Ask for a fresh catalog: start the loader, or wake it from its backoff."""
        self._catalog_wanted = True
        self._wake_loader.set()
        if self._loader is None or self._loader.done():
            self._loader = asyncio.ensure_future(self._load_catalog())

    async def refresh_catalog(self) -> None:
        """Request a catalog and wait until the loader is done (loaded, or out of retries)."""
        self.request_catalog()
        assert self._loader is not None
        await asyncio.shield(self._loader)

    async def _load_catalog(self) -> None:
        """Load `GET /v1/tools` while wanted; back off on failure, keeping the last good one."""
        failures = 0
        while self._catalog_wanted and self.stop is None:
            self._catalog_wanted = False
            self._wake_loader.clear()
            outcome = await self.broker.catalog()
            error = None
            self.catalog_refused = None
            if outcome.status in (401, 403):
                self.catalog_refused = Stop(
                    outcome.code or f"http_{outcome.status}", outcome.status, outcome.message or ""
                )
            if outcome.ok:
                try:
                    catalog = Catalog.parse(outcome.data)
                except CatalogError as exc:
                    error = f"invalid catalog: {exc}"
                else:
                    await self._install(catalog)
                    failures = 0
            else:
                error = outcome.message or outcome.code or "no answer"
            self.catalog_attempted.set()
            if error is None:
                continue
            self.catalog_error = error
            # A refused token is the stream's to report (once); anything else is said here.
            (log.info if outcome.status in (401, 403) else log.warning)(
                "could not load the tool catalog (%s); keeping the last good one", error
            )
            if failures >= len(CATALOG_RETRY_DELAYS) or outcome.status in (401, 403):
                return  # the next connect or announcement asks again
            self._catalog_wanted = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_loader.wait(), CATALOG_RETRY_DELAYS[failures])
            failures += 1

    async def _install(self, catalog: Catalog) -> None:
        previous = self.catalog
        self.catalog = catalog
        self.catalog_error = None
        if previous is not None and previous.revision == catalog.revision:
            return
        log.info(
            "tool catalog revision %s (%d operations)", catalog.revision, len(catalog.operations)
        )
        await self.announce_list_change()

    def _list_state(self) -> tuple[str | None, str | None]:
        return (
            self.catalog.revision if self.catalog else None,
            self.stop.code if self.stop else None,
        )

    async def announce_list_change(self) -> None:
        """`tools/list_changed` only when the host was answered a list that is now different.

        Never for the first catalog: a list the host has not been answered yet cannot be
        stale, and a notice racing the first answer made hosts list twice.
        """
        if self.listed_as is None or self.listed_as == self._list_state():
            return
        self.listed_as = None
        with contextlib.suppress(HostGone):
            await self.host.notify("notifications/tools/list_changed")

    async def wait_for_catalog(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.catalog_attempted.wait(), CATALOG_WAIT_SECONDS)

    async def until_a_session(self, grace: float = CLAIM_AFTER_SECONDS) -> None:
        """Return once the host looks like a session rather than a health check.

        `claude mcp list`/`get` send exactly what a session sends (initialize, initialized,
        tools/list) and quit within a few hundred milliseconds of the tool list; a session
        stays. So: a tool call, or the host still there `grace` after its handshake and after
        its first tool list was answered. A host that leaves first never claims the agent.
        """
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.tool_called.wait(), grace)
            if self.tool_called.is_set() or not self.listing:
                return
            # The tool list is still being answered (the catalog is slow): the host registers
            # its channel handler after it has the list, so wait for that, then the grace.
            while self.listing and not self.tool_called.is_set():
                await asyncio.sleep(0.05)

    def tools(self) -> list[types.Tool]:
        """The catalog's operations under their names, then the bridge's own tools.

        After a refusal every description starts with it, so a host's tool view and the model
        both see why this session sends nothing; get_context's carries the fix.
        """
        self.listed_as = self._list_state()
        listed: list[types.Tool] = []
        operations = self.catalog.operations if self.catalog else {}
        for name, operation in operations.items():
            if name in OWN_NAMES:
                continue
            listed.append(
                types.Tool(
                    name=name,
                    description=operation.description,
                    input_schema=operation.input_schema,
                )
            )
        for own in OWN_TOOLS:
            current = operations.get(own.name) if own.catalog_schema else None
            if current is None:
                description, schema = own.description, own.schema
            else:
                description = f"{current.description} {own.note}".strip()
                schema = current.input_schema
            listed.append(types.Tool(name=own.name, description=description, input_schema=schema))
        listed = [
            t.model_copy(update={"description": f"{t.description or ''} {CONTEXT_FIRST_HINT}"})
            if t.name not in ("get_context", "ready")
            else t
            for t in listed
        ]
        if self.stop is not None:
            listed = [self._refused(tool) for tool in listed]
        elif self.pane_problem is not None:
            said = (
                f"PUSHES ARE OFF: {self.pane_problem}. Nothing is typed into your pane; the "
                "broker keeps your messages pending: read them with get_messages."
            )
            listed = [
                t.model_copy(update={"description": f"{said}\n\n{t.description or ''}"})
                for t in listed
            ]
        return listed

    def _refused(self, tool: types.Tool) -> types.Tool:
        assert self.stop is not None
        stop = self.stop
        said = f"NOT CONNECTED: PocoLobby refused this session ({stop.status} {stop.code})"
        if tool.name == "get_context":
            said = f"{said}. {self.stopped_text()}"
        else:
            said = f"{said}; this tool sends nothing. get_context's description says how to fix it."
        return tool.model_copy(update={"description": f"{said}\n\n{tool.description or ''}"})

    # ------------------------------------------------------------ tool calls

    async def call_tool(self, name: str, arguments: Any) -> types.CallToolResult:
        """Run one tool; never raises, whatever the arguments."""
        try:
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                return failure("arguments: must be an object of named arguments")
            self.tool_called.set()
            if self.stop is not None:
                return failure(self.stopped_sentence(), self.bridge_facts())
            handler = self._handlers.get(name)
            if handler is not None:
                result = await handler(arguments)
            else:
                result = await self.run_operation(name, arguments)
            return self._context_first(name, result)
        except Exception as exc:
            log.exception("tool %s failed inside the bridge", name)
            return failure(
                f"The bridge failed while running {name} ({type(exc).__name__}), so its outcome "
                f"is unknown. {retry_advice(arguments if isinstance(arguments, dict) else {})}"
            )

    def _context_first(self, name: str, result: types.CallToolResult) -> types.CallToolResult:
        """A model that missed every bootstrap push learns from its first tool result."""
        if self.context_loaded or name in ("get_context", "ready") or self.stop is not None:
            return result
        said = types.TextContent(type="text", text=CONTEXT_FIRST)
        return result.model_copy(update={"content": [said, *result.content]})

    async def _gate(self) -> types.CallToolResult | None:
        """A refusal when this process cannot act for the agent, else None."""
        if self.stop is None and self.generation is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.linked.wait(), LINK_WAIT_SECONDS)
        if self.stop is not None:
            return failure(self.stopped_sentence(), self.bridge_facts())
        if self.generation is None:
            return failure(
                "Not sent: this bridge has not reached the PocoLobby broker at "
                f"{self.config.url} yet ({self.last_error or 'still connecting'}). Nothing was "
                "stored. Retry shortly with the same arguments (and the same client_request_id)."
            )
        return None

    async def _call(self, name: str, arguments: dict[str, Any]) -> Outcome | types.CallToolResult:
        """The broker's answer, or the gate's refusal when the bridge cannot call it yet."""
        refused = await self._gate()
        return refused if refused is not None else await self.broker.call(name, arguments)

    async def run_operation(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if "attachments" in arguments:
            return await self._send_with_attachments(name, arguments)
        outcome = await self._call(name, arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        return self.render(name, arguments, outcome)

    def places(self) -> Places:
        """Where the local file rules let this bridge read and save, now (HOME may change)."""
        return Places.current(self.config.identity)

    async def _send_with_attachments(
        self, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """A send naming local files: rules, read, describe, send, upload what is missing.

        Whether the operation takes files is decided by the current catalog, not by the schema
        the host cached: a host that lists an older send_message still sends files.
        """
        refused = await self._gate()
        if refused is not None:
            return refused
        if self.catalog is None:
            await self.wait_for_catalog()
        operation = self.catalog.get(name) if self.catalog else None
        if operation is None or "attachments" not in operation.arguments:
            known = "is not in" if operation is None else "takes no attachments in"
            return failure(
                f"Not sent: {name} {known} the broker's current catalog"
                f"{f' (revision {self.catalog.revision})' if self.catalog else ''}, so the "
                "bridge read no file and sent nothing. Files go with send_message, "
                "send_room_message, broadcast and schedule_message; list_operations shows "
                "which take attachments."
            )
        try:
            paths = attachments.parse_paths(arguments["attachments"])
        except attachments.BadArguments as exc:
            return failure(f"Not sent: {exc}. Nothing was read or stored.")
        try:
            local = await asyncio.to_thread(attachments.read_all, paths, self.places())
        except FileRefused as refusal:
            return failure(attachments.refused_text(name, refusal))
        outcome = await attachments.send_with_files(
            self.broker, self.broker.call, name, arguments, local
        )
        if isinstance(outcome, types.CallToolResult):
            return outcome
        return self.render(name, arguments, outcome)

    async def _get_attachment(self, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            request = attachments.parse_request(arguments)
        except attachments.BadArguments as exc:
            return failure(str(exc))
        refused = await self._gate()
        if refused is not None:
            return refused
        outcome = await attachments.get_attachment(self.broker, request, self.places())
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.transport is not None:  # a read changes nothing: no "unknown outcome"
            return failure(
                f"Not downloaded: the connection to the PocoLobby broker at {self.config.url} "
                f"failed ({outcome.message}). Nothing was shown or saved; retry get_attachment."
            )
        return self.render("get_attachment", arguments, outcome)

    def render(
        self, name: str, arguments: dict[str, Any], outcome: Outcome
    ) -> types.CallToolResult:
        """A broker answer as the model should read it; a superseded generation rechecks."""
        if outcome.code == "generation_superseded" and self.recheck is not None:
            # The binding moved on (a newer process, or the owner's reset) while the stream
            # still looked fine: reconnect it, so the broker's refusal settles the state.
            self.recheck()
        return render(name, arguments, outcome, self.config.url)

    def stopped_text(self) -> str:
        if self.stop is None:
            return ""
        return stopped_text(self.stop, self.agent_id, self.lobby_id)

    def stopped_sentence(self) -> str:
        """The refusal as the session's one event says it; every tool answer starts with it."""
        if self.stop is None:
            return ""
        stop = self.stop
        return f"PocoLobby bridge: not connected ({stop.status} {stop.code}). {self.stopped_text()}"

    def bridge_facts(self) -> dict[str, Any]:
        catalog = self.catalog
        facts: dict[str, Any] = {
            "runtime_id": self.runtime.runtime_id,
            "runtime_scope": self.runtime.scope,
            "generation": self.generation,
            "agent_id": self.agent_id,
            "lobby_id": self.lobby_id,
            "connection": self.state,
            "catalog_revision": catalog.revision if catalog else None,
            "catalog_revision_seen": self.seen_catalog.revision if self.seen_catalog else None,
            "bootstrap_complete": self.bootstrap_complete,
            "bridge_version": bridge_version(),
            "event_version": EVENT_VERSION,
            "broker_url": self.config.url,
        }
        offer = self.bootstrap_offer
        if offer is not None and not self.bootstrap_complete and offer[0] not in self.echoed_nonces:
            facts["bootstrap_nonce"] = offer[0]
            facts["next_step"] = f"call ready with nonce {offer[0]}"
        if self.stop is not None:
            facts["stopped"] = {
                "code": self.stop.code,
                "status": self.stop.status,
                "message": self.stop.message,
            }
        elif self.last_error:
            facts["last_connection_error"] = self.last_error
        if self.catalog_error:
            facts["catalog_error"] = self.catalog_error
        if self.pane_problem is not None:
            facts["delivery"] = {
                "transport": TRANSPORT_TMUX,
                "pane": None,
                "problem": self.pane_problem,
                "note": "nothing is typed into a pane; read your inbox with get_messages",
            }
        elif self.pane is not None:
            facts["delivery"] = {
                "transport": TRANSPORT_TMUX,
                "pane": self.pane.pane.pane_id,
                "held_since": self.pane.held_since,
                "held_reason": self.pane.held_reason,
                "last_error": self.pane.last_error,
            }
        else:
            facts["delivery"] = {"transport": TRANSPORT_CHANNEL}
        if self.runtime.scope == "process":
            facts["runtime_note"] = (
                "CLAUDE_CODE_SESSION_ID was not set, so this runtime belongs to this process "
                "only: after a restart the owner must run `pocolobby agent reset-runtime`."
            )
        return facts

    # ------------------------------------------------------------ the bridge's own tools

    async def _acknowledge_messages(self, arguments: dict[str, Any]) -> types.CallToolResult:
        outcome = await self._call("acknowledge_messages", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.ok and outcome.data is not None:
            self._remember_acknowledged(outcome.data.get("acknowledged"))
        return self.render("acknowledge_messages", arguments, outcome)

    def _remember_acknowledged(self, ids: Any) -> None:
        if isinstance(ids, list):
            self.acknowledged.update(i for i in ids if isinstance(i, int))

    async def _ready(self, arguments: dict[str, Any]) -> types.CallToolResult:
        outcome = await self._call("ready", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.ok:
            nonce = arguments.get("nonce")
            if isinstance(nonce, str):
                self.echoed_nonces.add(nonce)
            self.ready_generation = self.generation
        return self.render("ready", arguments, outcome)

    async def _save_checkpoint(self, arguments: dict[str, Any]) -> types.CallToolResult:
        outcome = await self._call("save_checkpoint", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.status == 404 and outcome.code == "unknown_tool":
            return failure(
                "Nothing was saved: this broker does not serve save_checkpoint yet (it is older "
                "than this bridge). Keep your handoff notes in the repository meanwhile."
            )
        if outcome.ok and outcome.data is not None:
            acknowledged = outcome.data.get("acknowledged")
            if not isinstance(acknowledged, list):
                acknowledged = arguments.get("acknowledge_message_ids")
            self._remember_acknowledged(acknowledged)
        return self.render("save_checkpoint", arguments, outcome)

    async def _get_context(self, arguments: dict[str, Any]) -> types.CallToolResult:
        self._context_calls += 1
        outcome = await self._call("get_context", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.status == 404 and outcome.code == "unknown_tool":
            return await self._local_context()
        if not outcome.ok or outcome.data is None:
            return self.render("get_context", arguments, outcome)
        self.seen_catalog = self.catalog or self.seen_catalog
        self.context_loaded = True
        context = dict(outcome.data)
        context["bridge"] = self.bridge_facts()
        return success(context)

    async def _local_context(self) -> types.CallToolResult:
        """What the bridge can offer when the broker has no get_context route yet."""
        context: dict[str, Any] = {
            "notice": (
                "This broker does not serve get_context yet, so your role, checkpoint and "
                "uncertain receipts are not available. Below are this bridge's facts, your "
                "pending inbox and a tool guide made from the current catalog."
            ),
        }
        inbox = await self.broker.call("get_messages", {"view": "inbox", "limit": 50})
        if inbox.ok and inbox.data is not None:
            context["inbox"] = [
                {k: m.get(k) for k in ("message_id", "from", "kind", "priority", "created_at")}
                for m in inbox.data.get("messages", [])
                if isinstance(m, dict)
            ]
            context["inbox_next_cursor"] = inbox.data.get("next_cursor")
        else:
            context["inbox_error"] = inbox.message or inbox.code
        if self.catalog is not None:
            context["tool_guide"] = local_guide(self.catalog)
            self.seen_catalog = self.catalog
        self.context_loaded = True
        context["bridge"] = self.bridge_facts()
        return success(context)

    async def _list_operations(self, arguments: dict[str, Any]) -> types.CallToolResult:
        if arguments:
            return failure(
                f"unknown argument {next(iter(arguments))!r}: list_operations takes no arguments"
            )
        if self.catalog is None:
            await self.wait_for_catalog()
        catalog = self.catalog
        bridge_tools = [
            {"name": t.name, "description": t.description, "input_schema": t.schema}
            for t in OWN_TOOLS
        ]
        if catalog is None:
            return failure(
                "The broker's catalog has not loaded yet "
                f"({self.catalog_error or 'no answer yet'}); retry shortly.",
                {"bridge_tools": bridge_tools},
            )
        self.seen_catalog = catalog
        return success(
            {
                "revision": catalog.revision,
                "operations": [op.definition() for op in catalog.operations.values()],
                "bridge_tools": bridge_tools,
                "note": "call_operation runs any of these operations with any of its arguments, "
                "whatever schema your tool list shows; the bridge's own tools shadow operations "
                "of the same name and keep their bookkeeping either way.",
            }
        )

    async def _call_operation(self, arguments: dict[str, Any]) -> types.CallToolResult:
        extra = [k for k in arguments if k not in ("name", "arguments")]
        if extra:
            return failure(
                f"unknown argument {extra[0]!r}: call_operation takes name and arguments"
            )
        if "name" not in arguments:
            return failure("missing argument 'name': the operation to run, e.g. send_message")
        name = arguments["name"]
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            return failure("name: must be an operation name as list_operations shows it")
        inner = arguments.get("arguments")
        if inner is None:
            inner = {}
        if not isinstance(inner, dict):
            return failure("arguments: must be an object of the operation's arguments")
        if name == "call_operation":
            return failure("name: call_operation cannot run itself; name the operation directly")
        handler = self._handlers.get(name)
        if handler is not None:
            return await handler(inner)
        return await self.run_operation(name, inner)
