"""Notices the broker pushes, written to the host: received, filtered, then written to the
session's channel or typed into its tmux pane, and confirmed (`host_written`) once written.
A bootstrap is offered again until `ready` echoes its nonce or the session shows it is
working; with `--deliver tmux` this
process also reports its delivery facts (held or not, and why) to the broker.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from lobbies.wire.frames import (
    FRAME_DELIVERY,
    FRAME_HOST_WRITTEN,
    FRAME_RECEIVED,
    HELD_REASON_CHARS,
    TRANSPORT_CHANNEL,
    TRANSPORT_TMUX,
    DeliveryFrame,
    NoticeFrame,
)
from lobbies.wire.jsontext import PARSE_DEPTH, JSONObject, load_json
from pocolobby.bridge import attachments
from pocolobby.bridge.broker import BrokerClient
from pocolobby.bridge.config import AgentConfig, Runtime
from pocolobby.bridge.continuity import Continuity
from pocolobby.bridge.host import HostGone, HostPipe
from pocolobby.bridge.listing import Listing
from pocolobby.bridge.pane import PaneDelivery, activity_line, notice_line
from pocolobby.bridge.stream import Background, SendFrame, Stream, log
from pocolobby.bridge.turns import turn_open

CHANNEL_METHOD = "notifications/claude/channel"
META_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The bootstrap is offered again after these pauses until `ready` echoes its nonce or the
# session shows it is working: a host may drop an event that arrives before it listens, and a
# model may miss one.
BOOTSTRAP_REPEAT_DELAYS = (3.0, 6.0, 12.0, 24.0, 48.0)
# A turn its hook reported this long before the process started still counts (the first
# prompt's turn may start while the host is still starting its MCP servers); an older one was
# left open by an earlier process of the conversation.
TURN_BEFORE_START = 30.0
# How notices reach the model, said again in get_context beside the MCP instructions' words.
PANE_NOTE = (
    'notices are lines typed into your input starting with "# pocolobby:", from this bridge, '
    "not your user: for new messages call get_messages, handle them, then acknowledge_messages "
    "with their ids; receipts and activity lines need no reply"
)
CHANNEL_NOTE = 'notices arrive as <channel source="pocolobby"> events; do not poll'


def clean_meta(raw: object) -> dict[str, str]:
    """Channel attributes: identifier keys with string values only; anything else is dropped."""
    if not isinstance(raw, dict):
        return {}
    return {
        k: v
        for k, v in raw.items()
        if isinstance(k, str) and META_KEY.match(k) and isinstance(v, str)
    }


def _payload(content: str) -> JSONObject:
    """The JSON object after a notice's headline, or {} when there is none."""
    _, _, rest = content.partition("\n")
    try:
        payload = load_json(rest, PARSE_DEPTH, "the notice")
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


@dataclass(frozen=True)
class Notice:
    """One notice frame as the bridge reads it (lobbies/push/frames.py builds it)."""

    notice_id: str
    kind: str  # bootstrap, messages, hint, ...
    content: str  # a headline, then a JSON payload
    message_ids: list[int]
    meta: dict[str, str]

    @classmethod
    def of(cls, frame: NoticeFrame) -> Notice:
        """The notice of a parsed frame (lobbies.wire.parse_notice), its meta fit for a channel."""
        return cls(
            frame["notice_id"],
            frame["notice_kind"],
            frame["content"],
            frame["message_ids"],
            clean_meta(frame["meta"]),
        )

    @property
    def payload(self) -> JSONObject:
        return _payload(self.content)

    @property
    def nonce(self) -> str | None:
        """A bootstrap's nonce (what `ready` echoes); None for any other notice."""
        nonce = self.payload.get("nonce") if self.kind == "bootstrap" else None
        return nonce if isinstance(nonce, str) else None

    @property
    def about_messages(self) -> bool:
        return self.kind in ("messages", "hint") and bool(self.message_ids)


class Notices:
    """The notice writer: the broker's pushes to the host's channel or the tmux pane, the
    bootstrap's repeats, and this process's delivery facts."""

    def __init__(
        self,
        config: AgentConfig,
        runtime: Runtime,
        host: HostPipe,
        broker: BrokerClient,
        stream: Stream,
        continuity: Continuity,
        listing: Listing,
        background: Background,
    ) -> None:
        self.config = config  # with `runtime`: whose turn file says the session works
        self.runtime = runtime
        self.host = host
        self.broker = broker  # the current generation (is the bootstrap complete?)
        self.stream = stream
        self.continuity = continuity
        self.listing = listing  # the catalog's news rides on notices
        self.background = background
        # Set for `--deliver tmux`: notices are typed into this pane instead of the channel.
        self.pane: PaneDelivery | None = None
        # `--deliver tmux` without a usable pane (unset, gone, no tmux): nothing is delivered,
        # the broker keeps every message pending, and the tools say why.
        self.pane_problem: str | None = None
        # Bootstraps whose line waits for the pane (`--deliver tmux`): a retry adds no second.
        self.pane_bootstraps: set[str] = set()
        self._repeater: asyncio.Task[None] | None = None
        self._repeater_nonce: str | None = None

    @property
    def tmux_delivery(self) -> bool:
        return self.pane is not None or self.pane_problem is not None

    async def on_notice(self, frame: NoticeFrame, send: SendFrame) -> None:
        """Receipt, filter, write to the host, and confirm the write to the broker."""
        notice_id = frame["notice_id"]
        await send({"type": FRAME_RECEIVED, "notice_id": notice_id})
        notice = Notice.of(frame)
        if self._already_answered(notice):
            return
        if self.pane_problem is not None:
            log.warning("notice %s not delivered: %s", notice_id, self.pane_problem)
            return
        if self.pane is not None:
            if notice.nonce is not None and notice.nonce in self.pane_bootstraps:
                # The broker's retry while the pane is busy: one line, typed once it idles.
                log.info("bootstrap %s already waits for the pane", notice.nonce)
                return
            line = (
                activity_line(notice.payload.get("activity"))
                if notice.kind == "activity"
                else notice_line(notice.kind, notice.message_ids, notice.nonce)
            )
            # Held notices wait for an idle prompt; the stream keeps reading meanwhile.
            self.background.spawn(self._type_notice(self.pane, notice, line, send))
            return
        await self._write_to_channel(notice, send)

    def _already_answered(self, notice: Notice) -> bool:
        """A bootstrap whose nonce `ready` echoed, or messages this session acknowledged."""
        if notice.kind == "bootstrap":
            if notice.nonce is not None and notice.nonce in self.continuity.echoed_nonces:
                log.info(
                    "dropped bootstrap notice %s: its nonce was already echoed", notice.notice_id
                )
                return True
            return False
        if notice.about_messages and all(
            i in self.continuity.acknowledged for i in notice.message_ids
        ):
            log.info(
                "dropped %s notice %s: this session acknowledged its messages",
                notice.kind,
                notice.notice_id,
            )
            return True
        return False

    async def _write_to_channel(self, notice: Notice, send: SendFrame) -> None:
        """The notice as a channel event (with the catalog's news), then `host_written`."""
        complete = self.continuity.bootstrap_complete(self.broker.generation)
        note, shown = (
            (None, None) if notice.kind == "bootstrap" else self.listing.catalog_note(complete)
        )
        text = notice.content if note is None else f"{notice.content}\n\n{note}"
        if notice.kind == "messages" and (named := attachments.attachments_note(notice.payload)):
            text = f"{text}\n\n{named}"
        params: JSONObject = {"content": text, "meta": {**notice.meta}}
        try:
            await self.host.notify(CHANNEL_METHOD, params)
        except HostGone:
            log.warning("the host closed stdout; notice %s was not written", notice.notice_id)
            return
        if notice.kind == "bootstrap":
            if notice.nonce is not None:
                self.offer_bootstrap_again(notice.nonce, params)
            self.listing.seen_catalog = self.listing.catalog
        elif shown is not None:
            self.listing.seen_catalog = shown
        await send({"type": FRAME_HOST_WRITTEN, "notice_id": notice.notice_id})

    def offer_bootstrap_again(self, nonce: str, params: JSONObject) -> None:
        """Repeat this bootstrap, identical, until `ready` echoes its nonce or the session
        shows it is working (or the bounded schedule ends, the host leaves, or the broker
        stops this process)."""
        self.continuity.bootstrap_offer = (nonce, params)
        if nonce in self.continuity.quiet_nonces:
            return  # the broker's own retry, written above: the session was working on it
        if self._repeater is not None and not self._repeater.done():
            if self._repeater_nonce == nonce:
                return  # the broker sent it again: the schedule already runs
            self._repeater.cancel()
        self._repeater_nonce = nonce
        # Counted now (the task starts later), or after the first pause for the bootstrap of
        # an admission: the refused turn's calls in flight are no sign of work on it.
        calls = None if self.continuity.admitted_mid_turn else self.continuity.tool_calls_started
        self.continuity.admitted_mid_turn = False
        self._repeater = asyncio.ensure_future(self._repeat_bootstrap(nonce, params, calls))

    def _bootstrap_answered(self, nonce: str) -> bool:
        return (
            nonce in self.continuity.echoed_nonces
            or self.stream.stop is not None
            or (
                self.continuity.bootstrap_offer is not None
                and self.continuity.bootstrap_offer[0] != nonce
            )
        )

    def working_since(self, calls_at_offer: int) -> str | None:
        """Why the session shows it is working since a bootstrap was offered, or None."""
        if self.continuity.tool_calls_started != calls_at_offer:
            return "it called a tool since"
        if self.continuity.tool_calls_running:
            return "a tool call is running"
        if turn_open(self.config, self.runtime, self.continuity.started_at - TURN_BEFORE_START):
            return "its hooks say a turn is running"
        return None

    async def _repeat_bootstrap(self, nonce: str, params: JSONObject, calls: int | None) -> None:
        """Quick repeats for a host that lost the first write or a model that missed it;
        none once the session is working, since Claude holds channel events while a tool
        runs and then shows every copy, each a turn. A working session that still needs it
        gets the broker's own retry, at its schedule's longest delay (300 s by default).

        `calls` None: this bootstrap followed a hand over to a session whose turn was calling
        tools while refused. That turn's last calls reach the bridge after the write and
        Claude Code starts no turn for an event that lands mid-turn, so tool calls count from
        the first pause on (a running call or an open turn still counts at once)."""
        for attempt, delay in enumerate(BOOTSTRAP_REPEAT_DELAYS, start=2):
            await asyncio.sleep(delay)
            if self._bootstrap_answered(nonce):
                log.info("bootstrap %s answered: not offered again", nonce)
                return
            if calls is None:
                calls = self.continuity.tool_calls_started
            working = self.working_since(calls)
            if working is not None:
                self.continuity.quiet_nonces.add(nonce)
                log.info(
                    "bootstrap %s not offered again: the session is working (%s)", nonce, working
                )
                return
            try:
                await self.host.notify(CHANNEL_METHOD, params)
            except HostGone:
                return
            log.info("offered bootstrap %s again (offer %d): no ready for it yet", nonce, attempt)

    async def _type_notice(
        self, pane: PaneDelivery, notice: Notice, line: str, send: SendFrame
    ) -> None:
        """Type the notice's line; host_written only once the line and Enter were typed."""
        notice_id = notice.notice_id
        nonce = notice.nonce

        def wanted() -> bool:  # messages acknowledged, or a nonce echoed, while it was held
            if nonce is not None:
                return nonce not in self.continuity.echoed_nonces
            return not notice.about_messages or not self.continuity.acknowledged >= set(
                notice.message_ids
            )

        if nonce is not None:
            self.pane_bootstraps.add(nonce)
        try:
            result = await pane.deliver(line, wanted)
        finally:
            if nonce is not None:
                self.pane_bootstraps.discard(nonce)
        if result == "dropped":
            log.info("dropped notice %s: answered while it was held", notice_id)
            return
        if result != "typed":
            log.warning("notice %s was not typed into the pane: %s", notice_id, pane.last_error)
            return
        try:
            await send({"type": FRAME_HOST_WRITTEN, "notice_id": notice_id})
        except Exception as exc:  # the socket closed: the broker re-pushes; typed twice is fine
            log.warning("notice %s typed but not confirmed: %s", notice_id, exc)

    def delivery_frame(self, attention: bool = False) -> DeliveryFrame:
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
        send = self.stream.send_frame
        if send is None or not self.tmux_delivery:
            return
        frame = self.delivery_frame(attention)

        async def report() -> None:
            try:
                await send(frame)
            except Exception as exc:  # the socket closed: the next welcome reports again
                log.info("delivery facts not reported: %s", exc)

        self.background.spawn(report())

    def delivery_facts(self) -> JSONObject:
        """How notices reach the model, for get_context's bridge facts."""
        if self.pane_problem is not None:
            return {
                "transport": TRANSPORT_TMUX,
                "pane": None,
                "problem": self.pane_problem,
                "note": "nothing is typed into a pane; read your inbox with get_messages",
            }
        if self.pane is not None:
            return {
                "transport": TRANSPORT_TMUX,
                "pane": self.pane.pane.pane_id,
                "held_since": self.pane.held_since,
                "held_reason": self.pane.held_reason,
                "last_error": self.pane.last_error,
                "note": PANE_NOTE,
            }
        return {"transport": TRANSPORT_CHANNEL, "note": CHANNEL_NOTE}
