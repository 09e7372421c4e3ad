"""The bridge's WebSocket: one per running bridge process, authenticated on the upgrade.

Headers on the upgrade: `Authorization: Bearer <agent token>`, `X-PocoLobby-Event-Version`,
`X-PocoLobby-Runtime` and, on a reconnect of the same process, `X-PocoLobby-Generation`.
A refusal is an `error` frame naming the code, then a close with 4000 + the HTTP status
(4426 bridge_outdated, 4401, 4403, 4409 runtime_conflict or generation_superseded).
A bridge whose host ends it cleanly sends `release` before closing (lobbies.wire).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar, cast

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

from lobbies.access.credentials import stated
from lobbies.access.hosts import HostRefused, site_for
from lobbies.access.tokens import agent_for_token
from lobbies.actions.runtime import (
    Claim,
    DeliveryReport,
    RuntimeConflict,
    claim_runtime,
    release_runtime,
    report_delivery,
    wait_for_hand_over,
)
from lobbies.api.catalog import catalog_for
from lobbies.errors import BrokerError, ErrorCode
from lobbies.fastlane import store
from lobbies.models import Agent
from lobbies.push import frames, presence
from lobbies.push.events import (
    ActivityMessage,
    BootstrapMessage,
    CatalogMessage,
    CloseMessage,
    HintMessage,
    ReceiptsMessage,
    SupersededMessage,
    WakeMessage,
    agent_group,
)
from lobbies.wire.frames import (
    EVENT_VERSION,
    EVENT_VERSION_HEADER,
    FRAME_CATALOG,
    FRAME_DELIVERY,
    FRAME_ERROR,
    FRAME_HEARTBEAT,
    FRAME_HOST_WRITTEN,
    FRAME_NOTICE,
    FRAME_RECEIVED,
    FRAME_RELEASE,
    FRAME_WELCOME,
    BrokerFrame,
    CatalogFrame,
    ErrorFrame,
    HeartbeatFrame,
    NoticeFrame,
    WelcomeFrame,
)
from lobbies.wire.jsontext import JsonTooDeep, load_json, may_hold_nul, nul_at

log = logging.getLogger("pocolobby.stream")
Arguments = ParamSpec("Arguments")
Result = TypeVar("Result")


def on_worker(
    fn: Callable[Arguments, Result],
) -> Callable[Arguments, Awaitable[Result]]:
    """Database work of a socket on the loop's default executor, not Django's sync thread.

    Each socket keeps its own order (its push lock). On PostgreSQL that executor is a pool;
    on SQLite `pocolobby serve` gives it one thread for all of the process's database work
    (lobbies/fastlane/server.py), so its connection's page cache stays valid.
    """
    wrapped = database_sync_to_async(fn, thread_sensitive=False)  # channels is untyped
    return cast(Callable[Arguments, Awaitable[Result]], wrapped)


MAX_FRAME_BYTES = 16 * 1024
FACT_FLUSH_SECONDS = 0.02
# Tries at writing a batch of facts when the store's connection is lost (then on a fresh one).
STORE_ATTEMPTS = 2
# Consumers of this process, for the presence heartbeat.
LOCAL: set[BridgeConsumer] = set()


class FactQueue:
    """Transport facts from every socket of this process, written in batches.

    Two facts per notice, each its own fsync, made the stream thread the bottleneck of push;
    batched, a burst of acknowledgments from many bridges costs one transaction.
    """

    def __init__(self) -> None:
        self.pending: list[frames.TransportFact] = []
        self.lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None

    def add(self, fact: frames.TransportFact) -> None:
        self.pending.append(fact)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FACT_FLUSH_SECONDS)
        await self.flush()

    async def flush(self) -> bool:
        """Write what is pending. False when the store failed even on a fresh connection:
        the batch is kept for the next flush, and a heartbeat, whose answer means "all you
        reported is recorded", is not answered."""
        async with self.lock:
            batch, self.pending = self.pending, []
            if not batch:
                return True
            try:
                await on_worker(_record_facts)(batch)
            except (OperationalError, InterfaceError) as error:
                reason = (str(error).splitlines() or ["?"])[0][:200]
                log.warning("could not record %d transport facts (%s)", len(batch), reason)
                self.pending = batch + self.pending
                return False
            except Exception:
                log.exception("could not record %d transport facts", len(batch))
            return True


def _record_facts(batch: list[frames.TransportFact]) -> None:
    """push.record_transport_facts, once more on a fresh connection when the store's
    connection was lost (a database restart, a terminated backend): the facts are marks,
    so writing one twice changes nothing."""
    for attempt in range(1, STORE_ATTEMPTS + 1):
        try:
            frames.record_transport_facts(batch)
            return
        except (OperationalError, InterfaceError):
            if attempt == STORE_ATTEMPTS:
                raise
            connection.close()


FACTS = FactQueue()
Item = TypeVar("Item")
Answer = TypeVar("Answer")
BATCH_MAX = 200


class Batches(Generic[Item, Answer]):
    """Database work of many sockets written together: a burst shares its commits.

    Each socket awaits its own answer; the sockets that ask while a batch is written go in
    the next one together. `write` takes the batch's items and returns one answer or
    exception per item (a failure stays that socket's), on the process's database thread.
    Used for claims and connection rows at connect (a reconnect storm) and for pushes (a
    broadcast), which were one transaction and one fsync per socket, and for the /v1
    requests of the embedded store (pocolobby.asgi). At most `most` items a batch.
    """

    def __init__(
        self, write: Callable[[list[Item]], list[Answer | Exception]], most: int = BATCH_MAX
    ) -> None:
        self.write = on_worker(write)  # one wrapper for every batch, not one per batch
        self.most = most
        self.pending: list[tuple[Item, asyncio.Future[Answer]]] = []
        self.task: asyncio.Task[None] | None = None

    async def __call__(self, item: Item) -> Answer:
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending.append((item, answer))
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._write())
        return await answer

    async def _write(self) -> None:
        while self.pending:
            # Bounded, so a storm's batch holds the write lock (and the one SQLite thread
            # every send also waits for) for a bounded time.
            batch, self.pending = self.pending[: self.most], self.pending[self.most :]
            answers: list[Answer | Exception]
            try:
                answers = await self.write([item for item, _ in batch])
            except Exception as error:
                answers = [error] * len(batch)
            for (_, future), answer in zip(batch, answers, strict=True):
                if future.done():
                    continue
                if isinstance(answer, Exception):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)


def _claims(many: list[dict[str, str]]) -> list[Claim | Exception]:
    """`_authenticate_and_claim` for sockets connecting together, in one transaction."""
    answers: list[Claim | Exception] = []
    with transaction.atomic():
        for headers in many:
            try:
                with transaction.atomic():  # a savepoint: a refusal stays this socket's
                    answers.append(_authenticate_and_claim(headers))
            except RuntimeConflict as refused:
                wait_for_hand_over(refused)  # outside the savepoint the refusal rolled back
                answers.append(refused)
            except Exception as error:
                answers.append(error)
    return answers


def _openings(many: list[tuple[int, int]]) -> list[int | Exception]:
    return list(presence.open_connections(many))


CLAIMS = Batches(_claims)
OPENINGS = Batches(_openings)
PUSHES = Batches(frames.push_frames)
RECONNECTS = Batches(frames.reconnected_many)


async def _on_the_store(
    batches: Batches[tuple[int, int], Answer],
    one: Callable[[int, int], Answer],
    ask: tuple[int, int],
) -> Answer:
    """On the embedded store, `ask` joins the sockets asking together in one transaction;
    on PostgreSQL it commits on its own pool thread, since one transaction holding many
    agents' rows would only add lock waits."""
    if store.embedded():
        return await batches(ask)
    answer: Answer = await on_worker(one)(*ask)
    return answer


async def next_push(agent_pk: int, generation: int) -> NoticeFrame | frames.Deferred | None:
    """The socket's next push; a broadcast's pushes share one commit on the embedded store."""
    return await _on_the_store(PUSHES, frames.push_frame, (agent_pk, generation))


async def reconnect_pushes(agent_pk: int, generation: int) -> None:
    """`frames.reconnected` for this socket; batched with a storm's on the embedded store."""
    await _on_the_store(RECONNECTS, frames.reconnected, (agent_pk, generation))


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def catalog_revision(agent_pk: int) -> str | None:
    agent = Agent.objects.filter(pk=agent_pk, enabled=True).first()
    return None if agent is None else catalog_for(agent)["revision"]


def _authenticate_and_claim(headers: dict[str, str]) -> Claim:
    if "origin" in headers:
        raise BrokerError(
            403, ErrorCode.ORIGIN_REFUSED, "the stream serves bridges, not browser pages"
        )
    try:
        place = site_for(headers.get("host", ""), "/v1/stream").place
    except HostRefused:
        place = None
    if place != "api":
        raise BrokerError(404, ErrorCode.NOT_FOUND, "this host serves no API")
    version = headers.get(EVENT_VERSION_HEADER.lower(), "")
    if version != str(EVENT_VERSION):
        raise BrokerError(
            426,
            ErrorCode.BRIDGE_OUTDATED,
            f"this broker speaks event version {EVENT_VERSION}; the bridge stated "
            f"{version or 'none'}: update PocoLobby on this machine and reconnect the bridge",
        )
    given = stated(headers)
    agent = agent_for_token(given.token)
    return claim_runtime(agent, given.runtime_id or "", given.generation)


class BridgeConsumer(AsyncWebsocketConsumer):
    claim: Claim | None = None
    connection_pk: int | None = None
    heard_since_beat = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent_notices: set[str] = set()

    async def connect(self) -> None:
        await self.accept()
        try:
            self.claim = await CLAIMS(_headers(self.scope))
        except BrokerError as error:
            await self._refuse(error)
            return
        agent = self.claim.agent
        self.agent_pk, self.generation = agent.pk, self.claim.generation
        self.group = agent_group(agent.pk)
        self.push_lock = asyncio.Lock()
        self.flush_task: asyncio.Task[None] | None = None
        self.deferred_task: asyncio.Task[None] | None = None
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.connection_pk = await OPENINGS((agent.pk, self.generation))
        LOCAL.add(self)
        # Fence every other socket of this agent: older generations and stale twins.
        await self.channel_layer.group_send(
            self.group,
            {
                "type": "agent.superseded",
                "generation": self.generation,
                "connection": self.connection_pk,
            },
        )
        welcome: WelcomeFrame = {
            "type": FRAME_WELCOME,
            "event_version": EVENT_VERSION,
            "agent_id": agent.agent_id,
            "lobby_id": agent.lobby.name,
            "runtime_id": agent.runtime_id,
            "generation": self.generation,
            "bootstrap": self.claim.started,
        }
        await self._send_frame(welcome)
        if self.claim.started:
            await self._send_built(lambda: frames.bootstrap_frame(self.agent_pk, self.generation))
        else:
            await reconnect_pushes(self.agent_pk, self.generation)
        await self._push()

    async def _refuse(self, error: BrokerError) -> None:
        refusal: ErrorFrame = {
            "type": FRAME_ERROR,
            "status": error.status,
            "code": error.code,
            "message": error.message,
        }
        if error.extra:  # a refusal's extra facts follow its message, as in an HTTP answer
            await self.send(text_data=json.dumps({**refusal, **error.extra}, ensure_ascii=False))
        else:
            await self._send_frame(refusal)
        await self.close(code=4000 + error.status)

    async def disconnect(self, code: int) -> None:
        LOCAL.discard(self)
        if self.claim is None:
            return
        for task in (self.flush_task, self.deferred_task):
            if task is not None:
                task.cancel()
        await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.connection_pk is not None:
            await on_worker(presence.close_connection)(self.connection_pk)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """channels' dispatch without its `aclose_old_connections()` before every handler.

        That call is a hop to Django's sync thread for each frame and each group message, a
        large share of the broker's GIL time in a broadcast (docs/PERFORMANCE.md, "Figures from
        code comments"); this
        consumer's database work runs only through `on_worker`, which closes stale
        connections around each call on the thread that holds them.
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message.get('type')!r}")
        await handler(message)

    # ------------------------------------------------------------ frames from the bridge

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.claim is None:
            return
        if text_data is None or len(text_data) > MAX_FRAME_BYTES:
            await self._error(
                ErrorCode.INVALID_FRAME if text_data is None else ErrorCode.FRAME_TOO_LARGE,
                f"frames are JSON text of at most {MAX_FRAME_BYTES} bytes",
            )
            return
        try:
            frame = load_json(text_data, what="the frame")
        except JsonTooDeep as error:
            await self._error(ErrorCode.INVALID_FRAME, str(error))
            return
        except ValueError:
            await self._error(ErrorCode.INVALID_FRAME, "the frame is not valid JSON")
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            await self._error(
                ErrorCode.INVALID_FRAME, "a frame is a JSON object with a string 'type'"
            )
            return
        if may_hold_nul(text_data) and nul_at(frame) is not None:
            await self._error(ErrorCode.INVALID_FRAME, "a frame's text may not hold NUL (U+0000)")
            return
        self.heard_since_beat = True
        kind = frame["type"]
        if kind == FRAME_HEARTBEAT:
            # A heartbeat's answer means: all you reported is recorded.
            if await FACTS.flush():
                beat: HeartbeatFrame = {"type": FRAME_HEARTBEAT}
                await self._send_frame(beat)
        elif kind in (FRAME_RECEIVED, FRAME_HOST_WRITTEN):
            notice_id = frame.get("notice_id")
            if isinstance(notice_id, str) and (
                notice_id in self.sent_notices
                or await on_worker(frames.notice_known)(self.agent_pk, self.generation, notice_id)
            ):
                FACTS.add((self.agent_pk, self.generation, notice_id, kind))
            else:
                await self._error(
                    ErrorCode.UNKNOWN_NOTICE, "no notice with that notice_id for this process"
                )
        elif kind == FRAME_DELIVERY:
            try:
                report = DeliveryReport.parse(frame)
            except BrokerError as error:
                await self._frame_refused(error)
                return
            if self.connection_pk is not None:
                await on_worker(report_delivery)(self.connection_pk, self.generation, report)
        elif kind == FRAME_RELEASE:
            await on_worker(release_runtime)(self.agent_pk, self.generation)
        else:
            await self._error(
                ErrorCode.UNKNOWN_FRAME_TYPE,
                f"unknown frame type {kind[:40]!r}; "
                "this broker takes heartbeat, received, host_written, delivery and release",
            )

    # ------------------------------------------------------------ group messages

    async def agent_wake(self, event: WakeMessage) -> None:
        if event["priority"] == "important":
            await self._push()
        elif self.flush_task is None or self.flush_task.done():
            self.flush_task = asyncio.create_task(self._push_after_batch_delay())

    async def _push_after_batch_delay(self) -> None:
        await asyncio.sleep(settings.BOUNDS.push_batch_ms / 1000)
        await self._push()

    async def agent_hint(self, event: HintMessage) -> None:
        if event["generation"] == self.generation:
            ids = list(event["message_ids"])
            await self._send_built(lambda: frames.hint_frame(self.agent_pk, self.generation, ids))

    async def agent_bootstrap(self, event: BootstrapMessage) -> None:
        if event["generation"] == self.generation:
            await self._send_built(lambda: frames.bootstrap_frame(self.agent_pk, self.generation))

    async def agent_receipts(self, event: ReceiptsMessage) -> None:
        receipts = list(event["receipts"])
        await self._send_built(lambda: frames.receipts_frame(self.agent_pk, receipts))

    async def agent_activity(self, event: ActivityMessage) -> None:
        changes = list(event["changes"])
        await self._send_built(lambda: frames.activity_frame(self.agent_pk, changes))

    async def agent_catalog(self, event: CatalogMessage) -> None:
        """The agent's tools changed: name the new revision; the bridge reloads the catalog."""
        revision = await on_worker(catalog_revision)(self.agent_pk)
        if revision is not None:
            async with self.push_lock:
                announced: CatalogFrame = {"type": FRAME_CATALOG, "revision": revision}
                await self._send_frame(announced)

    async def agent_superseded(self, event: SupersededMessage) -> None:
        if event.get("connection") == self.connection_pk:
            return
        if event.get("generation", 0) >= self.generation:
            await self._refuse(
                BrokerError(
                    409,
                    ErrorCode.GENERATION_SUPERSEDED,
                    "a newer connection of this agent took over; this one is closed",
                )
            )

    async def agent_close(self, event: CloseMessage) -> None:
        await self._refuse(BrokerError(403, ErrorCode(event["code"]), event["reason"]))

    # ------------------------------------------------------------ sending

    async def _push(self) -> None:
        async with self.push_lock:
            while True:
                frame = await next_push(self.agent_pk, self.generation)
                if frame is None:
                    return
                if isinstance(frame, frames.Deferred):
                    self._push_later(frame.seconds)
                    return
                await self._send_frame(frame)

    def _push_later(self, seconds: float) -> None:
        """Over the per-minute notice cap: one push when the window frees takes everything
        that waited (coalesced); later wakes meanwhile find this one already planned."""
        if self.deferred_task is None or self.deferred_task.done():
            self.deferred_task = asyncio.create_task(self._push_after(seconds))

    async def _push_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds + 0.05)
        await self._push()

    async def _send_built(self, build: Callable[[], NoticeFrame | None]) -> None:
        async with self.push_lock:
            frame = await on_worker(build)()
            if frame is not None:
                await self._send_frame(frame)

    async def _frame_refused(self, error: BrokerError) -> None:
        """A frame's own check refused it (its code is a literal where it is raised)."""
        await self._error(error.code, error.message)

    async def _error(self, code: ErrorCode, message: str) -> None:
        answer: ErrorFrame = {"type": FRAME_ERROR, "code": code, "message": message}
        await self._send_frame(answer)

    async def _send_frame(self, frame: BrokerFrame) -> None:
        if frame["type"] == FRAME_NOTICE:
            if len(self.sent_notices) > 5000:  # older ids fall back to a lookup
                self.sent_notices.clear()
            self.sent_notices.add(frame["notice_id"])
        await self.send(text_data=json.dumps(frame, ensure_ascii=False))
