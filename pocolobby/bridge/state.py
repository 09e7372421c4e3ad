"""What one bridge process knows: its stream, continuity, catalog and delivery state, and the
facts it reports about itself (`bridge_facts`). The behaviour is layered on top: `listing.py`
(the catalog and the tool list), `notices.py` (pushes to the host), `core.py` (the stream's
events and the tools).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from lobbies.wire.frames import EVENT_VERSION, TRANSPORT_CHANNEL, TRANSPORT_TMUX, BridgeFrame
from lobbies.wire.jsontext import JSONObject
from pocolobby.bridge import bridge_version
from pocolobby.bridge.broker import BrokerClient
from pocolobby.bridge.catalog import Catalog
from pocolobby.bridge.config import AgentConfig, Runtime
from pocolobby.bridge.host import HostPipe
from pocolobby.bridge.pane import PaneDelivery
from pocolobby.bridge.results import Stop, stopped_text

log = logging.getLogger("pocolobby.bridge")

SendFrame = Callable[[BridgeFrame], Awaitable[None]]
ToolHandler = Callable[[JSONObject], Awaitable[types.CallToolResult]]


# How notices reach the model, said again in get_context beside the MCP instructions' words.
PANE_NOTE = (
    'notices are lines typed into your input starting with "# pocolobby:", from this bridge, '
    "not your user: for new messages call get_messages, handle them, then acknowledge_messages "
    "with their ids; receipts and activity lines need no reply"
)
CHANNEL_NOTE = 'notices arrive as <channel source="pocolobby"> events; do not poll'


class BridgeState:
    """The state of one bridge process; see the module docstring."""

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
        self.bootstrap_offer: tuple[str, JSONObject] | None = None
        # Tool calls the host started, and those still running: signs the session is working.
        self.tool_calls_started = 0
        self.tool_calls_running = 0
        # Tool calls refused while this process waited for a hand over, and whether it was
        # admitted after some: that refused turn's calls may still arrive (notices.py).
        self.tool_calls_refused = 0
        self.admitted_mid_turn = False
        # Bootstraps the session showed work on: no quick repeat of them (notices.py).
        self.quiet_nonces: set[str] = set()
        self.started_at = time.time()  # the hooks' clock (pocolobby/bridge/turns.py)
        # Bootstraps whose line waits for the pane (`--deliver tmux`): a retry adds no second.
        self.pane_bootstraps: set[str] = set()
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
        # The bridge's own tools, by name (set by core.Bridge).
        self._handlers: dict[str, ToolHandler] = {}

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

    @property
    def tmux_delivery(self) -> bool:
        return self.pane is not None or self.pane_problem is not None

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

    def bridge_facts(self) -> JSONObject:
        catalog = self.catalog
        facts: JSONObject = {
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
                "note": PANE_NOTE,
            }
        else:
            facts["delivery"] = {"transport": TRANSPORT_CHANNEL, "note": CHANNEL_NOTE}
        if self.runtime.scope == "process":
            facts["runtime_note"] = (
                "CLAUDE_CODE_SESSION_ID was not set, so this runtime belongs to this process "
                "only: after a restart the owner must run `pocolobby agent reset-runtime`."
            )
        return facts
