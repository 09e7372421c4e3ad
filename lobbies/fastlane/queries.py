"""Every hand-written statement of the broker's hot paths, with its vendor branches, in one place.

The ORM compiles every query on every call, and on the send, push and connect paths that cost
more than the database work (docs/PERFORMANCE.md, "The send path"), so these statements are
written as SQL and run by lobbies/fastlane/store.py. Each rule is written once here, named for
what it means to the product; callers (lobbies/actions/, lobbies/push/frames.py,
lobbies/access/tokens.py) ask by name and get
plain values, small dataclasses or model instances back, never a row to pick apart.
Both SQLite and PostgreSQL take this SQL; where they differ, the branch is here.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from django.db import connection
from django.db.models.expressions import RawSQL

from lobbies.fastlane import store
from lobbies.models import Agent, Delivery, Lobby, Message

# --- Rules, in SQL ---------------------------------------------------------------------------

# A copy that still takes its recipient's room: pending, or waiting for its delivery time
# (lobbies.models.DELIVERABLE, which the partial index `delivery_queued` is built on). Written
# exactly as Django writes that index's condition, since SQLite uses a partial index only for
# a query whose WHERE holds the condition term for term (tests/lobbies/test_queries.py).
QUEUED = "(\"state\" = 'pending' OR (\"held_reason\" = 'scheduled' AND \"state\" = 'held'))"


def silent_self_note(recipient: str = "t.recipient_id") -> str:
    """A note to yourself wakes nobody; a reminder to yourself (scheduled) does
    (lobbies.models.SILENT_SELF_NOTE in SQL). Message `m`; `recipient` is the copy's
    recipient as SQL (a placeholder or a column)."""
    return f"m.sender_id = {recipient} AND m.deliver_at IS NULL AND m.schedule_id IS NULL"


def _pushable(agent: str, generation: str) -> str:
    """A copy that wakes `agent`'s runtime `generation`: pending, not yet sent to it, and no
    silent note to self. Delivery `t`, message `m`; `agent` and `generation` are SQL (a
    placeholder or a column)."""
    return (
        f"t.recipient_id = {agent} AND t.state = 'pending' "
        f"AND (t.pushed_generation IS NULL OR t.pushed_generation <> {generation}) "
        f"AND NOT ({silent_self_note(agent)})"
    )


def _locked(vendor: str, order: str) -> str:
    """Rows of `t` locked on PostgreSQL, in one order; SQLite's write transaction already
    holds the whole store."""
    return f" ORDER BY {order} FOR UPDATE OF t" if vendor == "postgresql" else ""


# --- Sending ---------------------------------------------------------------------------------

# A recipient's queue, count and bytes, from one scan of `delivery_queued`, as one text value:
# the send's sequence bump reads it as a scalar subquery of its RETURNING, which answers one
# column per subquery. Public for the test of its query plan.
RECIPIENT_QUEUE = (
    "SELECT COUNT(*) || ' ' || COALESCE(SUM(content_bytes), 0) "  # noqa: S608
    f"FROM lobbies_delivery WHERE recipient_id = %s AND {QUEUED}"
)
_OLDEST_STORED = "SELECT MIN(m.sequence) FROM lobbies_message m WHERE m.lobby_id = %s"
_SENT_SINCE = "SELECT COUNT(*) FROM lobbies_message WHERE sender_id = %s AND created_at > %s"
_BUMP = "UPDATE lobbies_lobby SET message_sequence = message_sequence + 1 WHERE id = %s"


@functools.cache
def _open_send_sql(rate: bool, queue: bool) -> str:
    returning = ["message_sequence", f"({_OLDEST_STORED})"]
    if rate:
        returning.append(f"({_SENT_SINCE})")
    if queue:
        returning.append(f"({RECIPIENT_QUEUE})")
    return f"{_BUMP} RETURNING {', '.join(returning)}"


@dataclass(frozen=True)
class Queue:
    """A recipient's copies that still take its room (`QUEUED`)."""

    messages: int
    bytes: int


def _queue(value: object) -> Queue:
    messages, _, size = str(value).partition(" ")
    return Queue(int(messages), int(size))


@dataclass(frozen=True)
class SendSlot:
    """What a send's first statement learned inside the write transaction."""

    sequence: int  # the new message's
    stored: int  # messages the lobby stored before this one
    sent_last_minute: int | None  # None: no rate was asked for
    queue: Queue | None  # the one recipient's, when asked for


def open_send(
    lobby_id: int, sender_pk: int, *, rate_since: datetime | None, queue_of: int | None
) -> SendSlot:
    """Take the lobby's next sequence, with the counts the send's bounds need, in one statement.

    Each statement inside the write transaction costs a round of the GIL while every other
    send waits on the write lock, so the lobby's oldest stored sequence, the sender's messages
    since `rate_since` and `queue_of`'s queue ride on the bump's RETURNING. On PostgreSQL the
    bump also serializes the lobby's sends.
    """
    params: list[Any] = [lobby_id, lobby_id]
    if rate_since is not None:
        params += [sender_pk, store.as_db_time(rate_since)]
    if queue_of is not None:
        params.append(queue_of)
    sql = _open_send_sql(rate_since is not None, queue_of is not None)
    sequence, oldest, *counts = store.scalar_row(sql, params)
    return SendSlot(
        sequence=int(sequence),
        stored=0 if oldest is None else int(sequence) - int(oldest),
        sent_last_minute=int(counts.pop(0)) if rate_since is not None else None,
        queue=_queue(counts[0]) if queue_of is not None else None,
    )


def sent_with_request_id(sender_pk: int, client_request_id: str) -> Message | None:
    """The sender's message of this client request id (a retry's original), if stored."""
    return store.select(
        Message, "t.sender_id = %s AND t.client_request_id = %s", [sender_pk, client_request_id]
    )


def agent_named(lobby_id: int, name: str) -> Agent | None:
    return store.select(Agent, "t.lobby_id = %s AND t.agent_id = %s", [lobby_id, name])


def recipient_queue(recipient_pk: int) -> Queue:
    return _queue(store.scalar_row(RECIPIENT_QUEUE, [recipient_pk])[0])


def record_progress(agent_pk: int, now: datetime) -> None:
    """The agent did something of its own (a send): its unseen-notice clock restarts."""
    store.execute(
        "UPDATE lobbies_agent SET last_progress_at = %s WHERE id = %s",
        [store.as_db_time(now), agent_pk],
    )


# --- Agents and their lobby ------------------------------------------------------------------


def locked_agent(agent_pk: int) -> Agent | None:
    """The agent's row locked (not its lobby's), its `lobby` holding only the name, whether
    delivery is paused and whether agents may watch (the rest deferred). Every bridge's
    connect, fence and push reads this, and the ORM compiling it was a large part of a
    reconnect storm (docs/PERFORMANCE.md, "Figures from code comments")."""
    agent = store.select(
        Agent,
        "t.id = %s",
        [agent_pk],
        join="JOIN lobbies_lobby l ON l.id = t.lobby_id",
        annotations={
            "lobby_name": "l.name",
            "delivery_paused": "l.delivery_paused",
            "agents_may_watch": "l.agents_may_watch",
        },
        for_update=True,
    )
    if agent is None:
        return None
    lobby = [agent.__dict__.pop(f) for f in ("lobby_name", "delivery_paused", "agents_may_watch")]
    agent.lobby = Lobby.from_db(
        connection.alias,
        ["id", "name", "delivery_paused", "agents_may_watch"],
        [agent.lobby_id, *lobby],
    )
    return agent


def runtime_retired(agent_pk: int, runtime_id: str) -> bool:
    """Whether the owner retired this conversation's binding of the agent."""
    sql = "SELECT 1 FROM lobbies_retiredruntime WHERE agent_id = %s AND runtime_id = %s LIMIT 1"
    return bool(store.rows(sql, [agent_pk, runtime_id]))


@dataclass(frozen=True)
class Bearer:
    """The agent a token hash names, with its credential's facts."""

    agent: Agent
    token_hash: str
    revoked: bool


def bearer(token_hash: str) -> Bearer | None:
    found = store.select(
        Agent,
        "c.token_hash = %s",
        [token_hash],
        join="JOIN lobbies_credential c ON c.agent_id = t.id",
        annotations={"token_hash": "c.token_hash", "token_revoked": "c.revoked_at IS NOT NULL"},
    )
    if found is None:
        return None
    stated = found.__dict__.pop("token_hash"), found.__dict__.pop("token_revoked")
    return Bearer(found, str(stated[0]), bool(stated[1]))


# --- Pushing ---------------------------------------------------------------------------------

_MESSAGE_JOIN = "JOIN lobbies_message m ON m.id = t.message_id"


def backlog(
    agent_pk: int, generation: int, up_to_sequence: int, bound_at: datetime
) -> list[Delivery]:
    """A new runtime's backlog: pushable copies accepted before its binding and delivered by
    then, in sequence order."""
    return store.select_all(
        Delivery,
        _pushable("%s", "%s") + " AND m.sequence <= %s AND t.delivered_at <= %s",
        [agent_pk, generation, agent_pk, up_to_sequence, store.as_db_time(bound_at)],
        join=_MESSAGE_JOIN,
        tail="ORDER BY m.sequence",
    )


_PUSHABLE_BY_ASK = (
    "WITH asks(n, agent, generation) AS (VALUES {values}) "  # noqa: S608
    "SELECT n, delivery, message FROM ("
    " SELECT a.n AS n, t.id AS delivery, t.message_id AS message,"
    " ROW_NUMBER() OVER (PARTITION BY a.n ORDER BY m.sequence) AS place"
    f" FROM asks a JOIN lobbies_delivery t ON t.recipient_id = a.agent {_MESSAGE_JOIN}"
    f" WHERE {_pushable('a.agent', 'a.generation')}"
    ") pushable WHERE place <= %s ORDER BY n, place"
)


def pushable_copies(
    asks: list[tuple[int, int]], among: list[int], *, limit: int
) -> dict[int, list[tuple[int, int]]]:
    """For the asks (agent, generation) numbered `among`, in one statement: each one's first
    `limit` pushable copies as (delivery id, message id), in sequence order."""
    if not among:
        return {}
    values = ", ".join(["(%s, %s, %s)"] * len(among))
    params: list[Any] = [v for n in among for v in (n, *asks[n])]
    found: dict[int, list[tuple[int, int]]] = {}
    sql = _PUSHABLE_BY_ASK.format(values=values)
    for n, delivery, message in store.rows(sql, [*params, limit]):
        found.setdefault(n, []).append((delivery, message))
    return found


def messages_by_id(ids: list[int]) -> list[Message]:
    return store.select_all(Message, f"t.id IN ({store.marks(ids)})", ids)


@dataclass
class Recipient:
    """What a push needs of its agent's row: read as one plain row per push, since a
    broadcast pushes to every agent of the lobby and a whole Agent instance per recipient
    was the largest piece of a push (docs/PERFORMANCE.md, "Figures from code comments")."""

    pk: int
    agent_id: str
    lobby_name: str
    runtime_id: str | None
    runtime_generation: int
    notify_next_at: datetime | None


_RECIPIENTS = (
    "SELECT t.id, t.agent_id, l.name, t.runtime_id, t.runtime_generation, t.notify_next_at "
    "FROM lobbies_agent t JOIN lobbies_lobby l ON l.id = t.lobby_id "
    "WHERE t.id IN ({marks}) AND t.enabled AND NOT t.resting AND NOT l.delivery_paused"
    "{lock}"
)


def push_recipients(agent_pks: list[int]) -> dict[int, Recipient]:
    """The agents that may be pushed to now (enabled, not resting, their lobby delivering),
    their rows locked as `locked_agent` locks one: the runtime cannot change before the push
    is recorded."""
    sql = _RECIPIENTS.format(marks=store.marks(agent_pks), lock=_locked(connection.vendor, "t.id"))
    time = store.time_reader()
    found = {}
    for pk, agent_id, lobby_name, runtime_id, generation, notify_next_at in store.rows(
        sql, agent_pks
    ):
        found[pk] = Recipient(
            pk, agent_id, lobby_name, runtime_id, generation, time(notify_next_at)
        )
    return found


_MESSAGE_NOTICES_SINCE = (
    "SELECT agent_id, COUNT(*) FROM lobbies_notice WHERE agent_id IN ({marks}) "
    "AND kind = 'messages' AND created_at > %s GROUP BY agent_id"
)


def message_notices_since(agent_pks: list[int], since: datetime) -> dict[int, int]:
    """How many message notices each agent was sent after `since` (none: left out)."""
    sql = _MESSAGE_NOTICES_SINCE.format(marks=store.marks(agent_pks))
    return {pk: int(n) for pk, n in store.rows(sql, [*agent_pks, store.as_db_time(since)])}


def newest_message_notices(agent_pk: int, since: datetime, limit: int) -> list[datetime]:
    """When the agent's newest `limit` message notices after `since` were made, newest first
    (index notice_agent_time)."""
    sql = (
        "SELECT created_at FROM lobbies_notice WHERE agent_id = %s AND kind = 'messages' "
        "AND created_at > %s ORDER BY created_at DESC LIMIT %s"
    )
    time = store.time_reader()
    found = store.rows(sql, [agent_pk, store.as_db_time(since), limit])
    return [cast(datetime, time(created_at)) for (created_at,) in found]  # NOT NULL


def schedule_first_retry(agent_pks: list[int], at: datetime) -> None:
    """The agents' next reminder of what they have not acknowledged is due `at`."""
    store.execute(
        f"UPDATE lobbies_agent SET notify_next_at = %s WHERE id IN ({store.marks(agent_pks)})",  # noqa: S608
        [store.as_db_time(at), *agent_pks],
    )


def mark_pushed(generation: int, deliveries: list[int], at: datetime) -> None:
    """The copies as sent to runtime `generation` `at`: one statement per chunk."""
    when = store.as_db_time(at)
    for start in range(0, len(deliveries), store.ROWS_PER_INSERT):
        chunk = deliveries[start : start + store.ROWS_PER_INSERT]
        store.execute(
            "UPDATE lobbies_delivery SET pushed_generation = %s, pushed_at = %s "  # noqa: S608
            f"WHERE id IN ({store.marks(chunk)})",
            [generation, when, *chunk],
        )


def push_unwritten_again(agent_pk: int, generation: int) -> None:
    """What runtime `generation` was sent but its bridge did not report written to the host
    is pushed again."""
    store.execute(
        "UPDATE lobbies_delivery SET pushed_generation = NULL WHERE recipient_id = %s "
        "AND state = 'pending' AND pushed_generation = %s "
        "AND (notified_generation IS NULL OR notified_generation <> %s)",
        [agent_pk, generation, generation],
    )


def hold_agents_for_transport_facts(agent_pks: set[int]) -> None:
    """The agents' rows, in one order, as an acknowledgment and a push take them before their
    deliveries: a notice's deliveries updated twice (received, then host_written) make
    PostgreSQL check their foreign keys at COMMIT, `FOR KEY SHARE` on the agent row, which
    closed a lock cycle with an acknowledgment holding it. NO KEY UPDATE: it still waits for
    an acknowledgment's FOR UPDATE, but not for a send's own foreign-key checks (FOR KEY
    SHARE on its recipients at COMMIT, while it holds its sender's row), which a FOR UPDATE
    here deadlocked with. (SQLite's write transaction already holds the whole store.)"""
    if connection.vendor == "sqlite":
        return
    list(
        Agent.objects.select_for_update(no_key=True)
        .filter(pk__in=agent_pks)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def record_copy_transport(
    agent_pk: int, message_ids: list[int], at: datetime, *, received: bool, written: int | None
) -> None:
    """The agent's copies of `message_ids` reached its bridge (`received`) and/or were written
    to the host by runtime `written` (a generation), `at`."""
    columns: list[str] = []
    values: list[Any] = []
    when = store.as_db_time(at)
    if received:
        columns.append("adapter_received_at = %s")
        values.append(when)
    if written is not None:
        columns += ["notification_attempted_at = %s", "notified_generation = %s"]
        values += [when, written]
    if not columns:
        return
    store.execute(
        f"UPDATE lobbies_delivery SET {', '.join(columns)} "  # noqa: S608
        f"WHERE recipient_id = %s AND message_id IN ({store.marks(message_ids)})",
        [*values, agent_pk, *message_ids],
    )


# --- Pages -----------------------------------------------------------------------------------


class Copy(NamedTuple):
    """A recipient's copy as a page shows it: the delivery's facts and the recipient's name."""

    message_id: int
    recipient_id: int
    agent_id: str
    state: str
    held_reason: str | None
    delivered_at: datetime | None
    adapter_received_at: datetime | None
    notification_attempted_at: datetime | None
    agent_seen_at: datetime | None
    redacted: bool


_COPIES = (
    "SELECT d.message_id, d.recipient_id, a.agent_id, d.state, d.held_reason, d.delivered_at,"
    " d.adapter_received_at, d.notification_attempted_at, d.agent_seen_at, d.redacted"
    ' FROM "lobbies_delivery" d JOIN "lobbies_agent" a ON a.id = d.recipient_id WHERE '
)


def copies_of(every: list[int], recipient_pk: int, own: list[int]) -> list[Copy]:
    """Every copy of the messages `every`, and `recipient_pk`'s own copies of the messages
    `own`, in one statement, ordered by recipient name."""
    clauses, params = [], []
    if every:
        clauses.append(f"d.message_id IN ({store.marks(every)})")
        params += every
    if own:
        clauses.append(f"(d.recipient_id = %s AND d.message_id IN ({store.marks(own)}))")
        params += [recipient_pk, *own]
    if not clauses:
        return []
    time = store.time_reader()
    return [
        Copy(
            message_id=message_id,
            recipient_id=recipient_id,
            agent_id=agent_id,
            state=state,
            held_reason=held_reason,
            delivered_at=time(delivered_at),
            adapter_received_at=time(adapter_received_at),
            notification_attempted_at=time(notification_attempted_at),
            agent_seen_at=time(agent_seen_at),
            redacted=bool(redacted),
        )
        for (
            message_id,
            recipient_id,
            agent_id,
            state,
            held_reason,
            delivered_at,
            adapter_received_at,
            notification_attempted_at,
            agent_seen_at,
            redacted,
        ) in store.rows(_COPIES + " OR ".join(clauses) + " ORDER BY a.agent_id", params)
    ]


def search_matches(phrase: str, below: int | None, limit: int) -> list[int]:
    """SQLite: the newest `limit` message ids under `below` whose content holds the FTS5
    `phrase` (the trigram table of migration 0013), newest first."""
    sql = "SELECT rowid FROM lobbies_message_search WHERE lobbies_message_search MATCH %s"
    params: list[Any] = [phrase]
    if below is not None:
        sql += " AND rowid < %s"
        params.append(below)
    sql += " ORDER BY rowid DESC LIMIT %s"
    return [rowid for (rowid,) in store.rows(sql, [*params, limit])]


def json_ids(ids: list[int]) -> RawSQL:
    """SQLite: `ids` as one parameter, for an ORM `__in` (one placeholder, not one each)."""
    return RawSQL("SELECT value FROM json_each(%s)", [json.dumps(ids)])


# --- Attachments -----------------------------------------------------------------------------


def lobby_attachment_bytes(lobby_pk: int) -> int:
    """Distinct content the lobby's live attachments and pending uploads hold."""
    sql = (
        "SELECT COALESCE(SUM(c.size), 0) FROM lobbies_attachmentcontent c WHERE c.sha256 IN ("
        "SELECT a.sha256 FROM lobbies_attachment a WHERE a.lobby_id = %s AND a.expired_at IS NULL"
        " UNION SELECT p.sha256 FROM lobbies_pendingupload p WHERE p.lobby_id = %s)"
    )
    return int(store.scalar_row(sql, [lobby_pk, lobby_pk])[0])


_ATTACHED = (
    "SELECT l.message_id, a.id, a.name, a.media_type, a.size "
    "FROM lobbies_messageattachment l JOIN lobbies_attachment a ON a.id = l.attachment_id "
    "WHERE l.message_id IN ({marks}) ORDER BY l.message_id, l.position"
)


@dataclass(frozen=True)
class Attached:
    """A file of a message, as descriptors name it."""

    message_id: int
    pk: int
    name: str
    media_type: str
    size: int


def attached_to(message_ids: list[int]) -> list[Attached]:
    """The files of the messages, by message, in the order sent."""
    sql = _ATTACHED.format(marks=store.marks(message_ids))
    return [
        Attached(message_id=message_id, pk=pk, name=name, media_type=media_type, size=size)
        for message_id, pk, name, media_type, size in store.rows(sql, message_ids)
    ]
