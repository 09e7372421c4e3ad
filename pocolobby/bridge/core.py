"""The bridge's behaviour towards the broker's stream and the host's tool calls.

One `Bridge` per process. The WebSocket loop (`link.py`) feeds it welcomes, stops and notices;
the MCP server (`server.py`) asks it for the tool list and runs tool calls through it. Nothing
here raises into the host: every failure becomes a tool result that says what happened.
`Bridge` owns one object per concern, each given only what it uses: `stream.Stream` (the
stream's state), `continuity.Continuity` (what the session did in this process),
`listing.Listing` (the catalog and the tool list) and `notices.Notices` (pushes to the host);
this module holds the stream's events, tool calls and the bridge's own tools.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import mcp_types as types

from lobbies.wire.errors import ErrorCode
from lobbies.wire.frames import EVENT_VERSION, WelcomeFrame
from lobbies.wire.jsontext import JSONObject, JSONValue
from lobbies.wire.media import DEFAULT_ATTACHMENT_LIMITS
from pocolobby.bridge import attachments, bridge_version
from pocolobby.bridge.broker import BrokerClient, Outcome
from pocolobby.bridge.catalog import TOOL_NAME, local_guide
from pocolobby.bridge.config import AgentConfig, Runtime
from pocolobby.bridge.continuity import Continuity
from pocolobby.bridge.files import FileRefused, Places
from pocolobby.bridge.host import HostGone, HostPipe
from pocolobby.bridge.listing import Listing
from pocolobby.bridge.notices import CHANNEL_METHOD, Notices
from pocolobby.bridge.results import Stop, as_text, failure, render, retry_advice, success
from pocolobby.bridge.stream import Background, Stream, log
from pocolobby.bridge.tools import OWN_TOOLS

# How long a tool call waits for a first connection before saying it was not sent.
LINK_WAIT_SECONDS = 5.0
CONTEXT_FIRST = (
    "PocoLobby: this session has not loaded its context yet. Call get_context first (your "
    "role, checkpoint and inbox), then ready with the bootstrap nonce it shows."
)
ToolHandler = Callable[[JSONObject], Awaitable[types.CallToolResult]]


class Bridge:
    """One bridge process: its parts, the stream's events and the tool calls."""

    def __init__(
        self, config: AgentConfig, runtime: Runtime, host: HostPipe, broker: BrokerClient
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.host = host
        self.broker = broker
        self.stream = Stream(config.agent, config.lobby)
        self.continuity = Continuity()
        self.background = Background()
        self.listing = Listing(broker, host, self.stream)
        self.notices = Notices(
            config,
            runtime,
            host,
            broker,
            self.stream,
            self.continuity,
            self.listing,
            self.background,
        )
        # The bridge's own tools, by name.
        self._handlers: dict[str, ToolHandler] = {
            "acknowledge_messages": self._acknowledge_messages,
            "get_context": self._get_context,
            "save_checkpoint": self._save_checkpoint,
            "ready": self._ready,
            "list_operations": self._list_operations,
            "call_operation": self._call_operation,
            "get_attachment": self._get_attachment,
        }

    # ------------------------------------------------------------ the stream's events

    @property
    def generation(self) -> int | None:
        return self.broker.generation

    def on_welcome(self, frame: WelcomeFrame) -> None:
        generation = frame["generation"]
        if self.stream.end_wait():  # handed over: the tools work now, and a bootstrap follows
            log.info("admitted: this conversation now holds the agent")
            self.continuity.admitted_mid_turn = self.continuity.tool_calls_refused > 0
            self.background.spawn(self._tools_work_now())
        if frame["runtime_id"] not in (None, self.runtime.runtime_id):
            log.warning("the broker's welcome names another runtime id")
        self.broker.generation = generation
        self.stream.welcome(frame)
        log.info(
            "connected to %s as %s/%s, generation %s%s",
            self.config.url,
            self.stream.lobby_id,
            self.stream.agent_id,
            generation,
            " (new process: bootstrap follows)" if frame["bootstrap"] else "",
        )
        self.listing.request_catalog()

    async def _tools_work_now(self) -> None:
        """After a wait: the host's tool list failed or said "refused", so it lists again."""
        self.listing.listed_as = None
        with contextlib.suppress(HostGone):
            await self.host.notify("notifications/tools/list_changed")

    async def on_stop(self, stop: Stop) -> None:
        """The broker refused this process for good: stop and tell the session once."""
        stream = self.stream
        if not stream.stopped(stop):
            return
        # The one stderr line of a refusal: the host shows it, so it carries the fix.
        log.error(
            "not connected to PocoLobby (%s %s): %s", stop.status, stop.code, stream.stopped_text()
        )
        meta: JSONObject = {
            "priority": "important",
            "scope": "notice",
            "agent_id": stream.agent_id,
            "lobby_id": stream.lobby_id,
        }
        payload: JSONObject = {"stopped": {"code": stop.code, "status": stop.status}}
        content = f"{stream.stopped_sentence()}\n{as_text(payload)}"
        with contextlib.suppress(HostGone):
            await self.host.notify(CHANNEL_METHOD, {"content": content, "meta": meta})
        await self.listing.announce_list_change()

    def catalog_announced(self, revision: str) -> None:
        catalog = self.listing.catalog
        if catalog is None or revision != catalog.revision:
            self.listing.request_catalog()

    # ------------------------------------------------------------ tool calls

    async def call_tool(self, name: str, arguments: JSONObject | None) -> types.CallToolResult:
        """Run one tool; never raises, whatever the arguments."""
        try:
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                return failure("arguments: must be an object of named arguments")
            self.listing.tool_called.set()
            continuity = self.continuity
            if self.stream.stop is not None:
                continuity.tool_calls_refused += 1
                return failure(self.stream.stopped_sentence(), self.bridge_facts())
            continuity.tool_calls_started += 1
            continuity.tool_calls_running += 1
            try:
                handler = self._handlers.get(name)
                if handler is not None:
                    result = await handler(arguments)
                else:
                    result = await self.run_operation(name, arguments)
            finally:
                continuity.tool_calls_running -= 1
            return self._context_first(name, result)
        except Exception as exc:
            log.exception("tool %s failed inside the bridge", name)
            return failure(
                f"The bridge failed while running {name} ({type(exc).__name__}), so its outcome "
                f"is unknown. {retry_advice(arguments if isinstance(arguments, dict) else {})}"
            )

    def _context_first(self, name: str, result: types.CallToolResult) -> types.CallToolResult:
        """A model that missed every bootstrap push learns from its first tool result."""
        if self.continuity.context_loaded or name in ("get_context", "ready") or self.stream.stop:
            return result
        said = types.TextContent(type="text", text=CONTEXT_FIRST)
        return result.model_copy(update={"content": [said, *result.content]})

    async def _gate(self) -> types.CallToolResult | None:
        """A refusal when this process cannot act for the agent, else None."""
        stream = self.stream
        if stream.stop is None and self.generation is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stream.linked.wait(), LINK_WAIT_SECONDS)
        if stream.stop is not None:
            return failure(stream.stopped_sentence(), self.bridge_facts())
        if self.generation is None:
            return failure(
                "Not sent: this bridge has not reached the PocoLobby broker at "
                f"{self.config.url} yet ({stream.last_error or 'still connecting'}). Nothing was "
                "stored. Retry shortly with the same arguments (and the same client_request_id)."
            )
        return None

    async def _call(self, name: str, arguments: JSONObject) -> Outcome | types.CallToolResult:
        """The broker's answer, or the gate's refusal when the bridge cannot call it yet."""
        refused = await self._gate()
        return refused if refused is not None else await self.broker.call(name, arguments)

    async def run_operation(self, name: str, arguments: JSONObject) -> types.CallToolResult:
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
        self, name: str, arguments: JSONObject
    ) -> types.CallToolResult:
        """A send naming local files: rules, read, describe, send, upload what is missing.

        Whether the operation takes files is decided by the current catalog, not by the schema
        the host cached: a host that lists an older send_message still sends files.
        """
        refused = await self._gate()
        if refused is not None:
            return refused
        listing = self.listing
        if listing.catalog is None:
            await listing.wait_for_catalog()
        catalog = listing.catalog
        operation = catalog.get(name) if catalog else None
        if operation is None or "attachments" not in operation.arguments:
            known = "is not in" if operation is None else "takes no attachments in"
            return failure(
                f"Not sent: {name} {known} the broker's current catalog"
                f"{f' (revision {catalog.revision})' if catalog else ''}, so the "
                "bridge read no file and sent nothing. Files go with send_message, "
                "send_room_message, broadcast and schedule_message; list_operations shows "
                "which take attachments."
            )
        try:
            paths = attachments.parse_paths(arguments["attachments"])
        except attachments.BadArguments as exc:
            return failure(f"Not sent: {exc}. Nothing was read or stored.")
        try:
            limits = catalog.limits if catalog is not None else DEFAULT_ATTACHMENT_LIMITS
            local = await asyncio.to_thread(attachments.read_all, paths, self.places(), limits)
        except FileRefused as refusal:
            return failure(attachments.refused_text(name, refusal))
        outcome = await attachments.send_with_files(
            self.broker, self.broker.call, name, arguments, local
        )
        if isinstance(outcome, types.CallToolResult):
            return outcome
        return self.render(name, arguments, outcome)

    async def _get_attachment(self, arguments: JSONObject) -> types.CallToolResult:
        try:
            request = attachments.parse_request(arguments)
        except attachments.BadArguments as exc:
            return failure(str(exc))
        refused = await self._gate()
        if refused is not None:
            return refused
        catalog = self.listing.catalog
        limits = catalog.limits if catalog is not None else DEFAULT_ATTACHMENT_LIMITS
        outcome = await attachments.get_attachment(self.broker, request, self.places(), limits)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.transport is not None:  # a read changes nothing: no "unknown outcome"
            return failure(
                f"Not downloaded: the connection to the PocoLobby broker at {self.config.url} "
                f"failed ({outcome.message}). Nothing was shown or saved; retry get_attachment."
            )
        return self.render("get_attachment", arguments, outcome)

    def render(self, name: str, arguments: JSONObject, outcome: Outcome) -> types.CallToolResult:
        """A broker answer as the model should read it; a superseded generation rechecks."""
        recheck = self.stream.recheck
        if outcome.code == ErrorCode.GENERATION_SUPERSEDED and recheck is not None:
            # The binding moved on (a newer process, or the owner's reset) while the stream
            # still looked fine: reconnect it, so the broker's refusal settles the state.
            recheck()
        return render(name, arguments, outcome, self.config.url)

    def bridge_facts(self) -> JSONObject:
        """What this process reports about itself in get_context and refusals."""
        stream, listing = self.stream, self.listing
        catalog, seen = listing.catalog, listing.seen_catalog
        facts: JSONObject = {
            "runtime_id": self.runtime.runtime_id,
            "runtime_scope": self.runtime.scope,
            "generation": self.generation,
            "agent_id": stream.agent_id,
            "lobby_id": stream.lobby_id,
            "connection": stream.state,
            "catalog_revision": catalog.revision if catalog else None,
            "catalog_revision_seen": seen.revision if seen else None,
            "bootstrap_complete": self.continuity.bootstrap_complete(self.generation),
            "bridge_version": bridge_version(),
            "event_version": EVENT_VERSION,
            "broker_url": self.config.url,
        }
        nonce = self.continuity.waiting_nonce(self.generation)
        if nonce is not None:
            facts["bootstrap_nonce"] = nonce
            facts["next_step"] = f"call ready with nonce {nonce}"
        if stream.stop is not None:
            facts["stopped"] = {
                "code": stream.stop.code,
                "status": stream.stop.status,
                "message": stream.stop.message,
            }
        elif stream.last_error:
            facts["last_connection_error"] = stream.last_error
        if listing.catalog_error:
            facts["catalog_error"] = listing.catalog_error
        facts["delivery"] = self.notices.delivery_facts()
        if self.runtime.scope == "process":
            facts["runtime_note"] = (
                "CLAUDE_CODE_SESSION_ID was not set, so this runtime belongs to this process "
                "only: after a restart the owner must run `pocolobby agent reset-runtime`."
            )
        return facts

    # ------------------------------------------------------------ the bridge's own tools

    async def _acknowledge_messages(self, arguments: JSONObject) -> types.CallToolResult:
        outcome = await self._call("acknowledge_messages", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.ok and outcome.data is not None:
            self.continuity.remember_acknowledged(outcome.data.get("acknowledged"))
        return self.render("acknowledge_messages", arguments, outcome)

    async def _ready(self, arguments: JSONObject) -> types.CallToolResult:
        outcome = await self._call("ready", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.ok:
            nonce = arguments.get("nonce")
            if isinstance(nonce, str):
                self.continuity.echoed_nonces.add(nonce)
            self.continuity.ready_generation = self.generation
        return self.render("ready", arguments, outcome)

    async def _save_checkpoint(self, arguments: JSONObject) -> types.CallToolResult:
        outcome = await self._call("save_checkpoint", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.status == 404 and outcome.code == ErrorCode.UNKNOWN_TOOL:
            return failure(
                "Nothing was saved: this broker does not serve save_checkpoint yet (it is older "
                "than this bridge). Keep your handoff notes in the repository meanwhile."
            )
        if outcome.ok and outcome.data is not None:
            acknowledged = outcome.data.get("acknowledged")
            if not isinstance(acknowledged, list):
                acknowledged = arguments.get("acknowledge_message_ids")
            self.continuity.remember_acknowledged(acknowledged)
        return self.render("save_checkpoint", arguments, outcome)

    async def _get_context(self, arguments: JSONObject) -> types.CallToolResult:
        outcome = await self._call("get_context", arguments)
        if isinstance(outcome, types.CallToolResult):
            return outcome
        if outcome.status == 404 and outcome.code == ErrorCode.UNKNOWN_TOOL:
            return await self._local_context()
        if not outcome.ok or outcome.data is None:
            return self.render("get_context", arguments, outcome)
        self.listing.seen_catalog = self.listing.catalog or self.listing.seen_catalog
        self.continuity.context_loaded = True
        context = dict(outcome.data)
        context["bridge"] = self.bridge_facts()
        return success(context)

    async def _local_context(self) -> types.CallToolResult:
        """What the bridge can offer when the broker has no get_context route yet."""
        context: JSONObject = {
            "notice": (
                "This broker does not serve get_context yet, so your role, checkpoint and "
                "uncertain receipts are not available. Below are this bridge's facts, your "
                "pending inbox and a tool guide made from the current catalog."
            ),
        }
        inbox = await self.broker.call("get_messages", {"view": "inbox", "limit": 50})
        if inbox.ok and inbox.data is not None:
            messages = inbox.data.get("messages")
            context["inbox"] = [
                {k: m.get(k) for k in ("message_id", "from", "kind", "priority", "created_at")}
                for m in (messages if isinstance(messages, list) else [])
                if isinstance(m, dict)
            ]
            context["inbox_next_cursor"] = inbox.data.get("next_cursor")
        else:
            context["inbox_error"] = inbox.message or inbox.code
        if self.listing.catalog is not None:
            context["tool_guide"] = local_guide(self.listing.catalog)
            self.listing.seen_catalog = self.listing.catalog
        self.continuity.context_loaded = True
        context["bridge"] = self.bridge_facts()
        return success(context)

    async def _list_operations(self, arguments: JSONObject) -> types.CallToolResult:
        if arguments:
            return failure(
                f"unknown argument {next(iter(arguments))!r}: list_operations takes no arguments"
            )
        if self.listing.catalog is None:
            await self.listing.wait_for_catalog()
        catalog = self.listing.catalog
        bridge_tools: list[JSONValue] = [
            {"name": t.name, "description": t.description, "input_schema": t.schema}
            for t in OWN_TOOLS
        ]
        if catalog is None:
            return failure(
                "The broker's catalog has not loaded yet "
                f"({self.listing.catalog_error or 'no answer yet'}); retry shortly.",
                {"bridge_tools": bridge_tools},
            )
        self.listing.seen_catalog = catalog
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

    async def _call_operation(self, arguments: JSONObject) -> types.CallToolResult:
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
