"""A view may run twice (lobbies/actions/__init__.py): every tool of the catalog, served in
a shared commit that is abandoned and served again (lobbies.fastlane.lane._serve_together), leaves
exactly what one run leaves: the same store, the same answer, the same publications.

The tools come from the catalog, so a new tool fails here until it has arguments below.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.http import HttpResponse

from lobbies.actions.runtime import claim_runtime
from lobbies.api.catalog import TOOLS, Tool
from lobbies.fastlane import lane
from lobbies.push import events
from tests.conftest import AgentClient
from tests.fast_lane import agent_post

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "connection.vendor != 'sqlite'",
        reason="the optimistic shared commit is the embedded store's",
    ),
]

NOW = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@dataclasses.dataclass(frozen=True)
class World:
    """What the tools act on: lead's bridge process, a message waiting for lead, a room, a
    scheduled message and lead's stored send that the batch's other request retries."""

    runtime_id: str
    generation: int
    nonce: str
    waiting_id: int
    scheduled_id: int
    stored_send: dict[str, Any]


ARGUMENTS: dict[str, Callable[[World], dict[str, Any]]] = {
    "send_message": lambda w: {"to": "backend", "content": "hello", "client_request_id": "t1"},
    "send_room_message": lambda w: {
        "room_id": "core",
        "content": "to the room",
        "client_request_id": "t2",
    },
    "broadcast": lambda w: {"content": "to everyone", "client_request_id": "t3"},
    "schedule_message": lambda w: {
        "to": "backend",
        "content": "stand-up",
        "client_request_id": "t4",
        "time_zone": "Europe/Paris",
        "times": ["09:30"],
    },
    "list_scheduled": lambda w: {},
    "cancel_scheduled": lambda w: {"message_id": w.scheduled_id},
    "update_scheduled": lambda w: {"message_id": w.scheduled_id, "content": "moved"},
    "list_rooms": lambda w: {},
    "create_room": lambda w: {"room_id": "ops", "members": ["backend"]},
    "set_room_members": lambda w: {"room_id": "core", "members": ["lead"]},
    "add_room_members": lambda w: {"room_id": "quiet", "members": ["backend"]},
    "remove_room_members": lambda w: {"room_id": "core", "members": ["backend"]},
    "delete_room": lambda w: {"room_id": "core"},
    "rest_agents": lambda w: {"agent_ids": ["backend"], "rest": True},
    "watch_agents": lambda w: {"agent_ids": ["backend"]},
    "get_messages": lambda w: {},
    "acknowledge_messages": lambda w: {"message_ids": [w.waiting_id]},
    "list_agents": lambda w: {},
    "set_status": lambda w: {"status": "reviewing the parser"},
    "set_owner_requests": lambda w: {"count": 1, "line": "approve the migration"},
    "get_context": lambda w: {},
    "save_checkpoint": lambda w: {
        "expected_revision": 0,
        "checkpoint": {"plan": "ship it"},
        "covers_receipts_through": 0,
        "acknowledge_message_ids": [],
    },
    "read_checkpoint": lambda w: {},
    "ready": lambda w: {"nonce": w.nonce, "checkpoint_revision": 0},
}


def test_every_tool_in_the_catalog_has_arguments_here() -> None:
    assert set(ARGUMENTS) == set(TOOLS), "give a new tool its arguments in ARGUMENTS"


@pytest.fixture
def lead(make_agent: Callable[..., AgentClient], time_machine: Any) -> AgentClient:
    time_machine.move_to(NOW, tick=False)
    return make_agent("lead", manage_rooms=True, broadcast=True)


@pytest.fixture
def world(lead: AgentClient, backend: AgentClient) -> World:
    runtime_id = str(uuid.uuid4())
    claim = claim_runtime(lead.agent, runtime_id, None)
    waiting = backend.send("lead", "review this", "w1")
    lead.ok("create_room", room_id="core", members=["lead", "backend"])
    lead.ok("create_room", room_id="quiet", members=["lead"])
    later = (NOW + timedelta(hours=2)).isoformat()
    scheduled = lead.send("backend", "later", "s1", deliver_at=later)
    stored_send = {"to": "backend", "content": "stored once", "client_request_id": "again"}
    lead.ok("send_message", **stored_send)
    return World(
        runtime_id=runtime_id,
        generation=claim.generation,
        nonce=str(claim.agent.bootstrap_nonce),
        waiting_id=int(waiting["message_id"]),
        scheduled_id=int(scheduled["message_id"]),
        stored_send=stored_send,
    )


def _request(lead: AgentClient, world: World, path: str, body: dict[str, Any]) -> Any:
    """A request of lead's bridge process (its runtime headers), as uvicorn hands it over."""
    request = agent_post(lead.token, body, path)
    request.META["HTTP_X_POCOLOBBY_RUNTIME"] = world.runtime_id
    request.META["HTTP_X_POCOLOBBY_GENERATION"] = str(world.generation)
    return request


@dataclasses.dataclass
class Outcome:
    answer: dict[str, Any]
    store: dict[str, list[dict[str, Any]]]
    published: list[tuple[str, dict[str, Any]]]
    logged: list[tuple[str, int, str]]


def _store() -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of ours, in primary key order."""
    return {
        model._meta.label: list(model._default_manager.order_by("pk").values())
        for app in ("lobbies", "console", "board")
        for model in apps.get_app_config(app).get_models()
    }


def _without_notice_ids(store: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A push notice's id is a random UUID, new in each run; everything else is compared."""
    return {
        label: [{k: v for k, v in row.items() if not isinstance(v, uuid.UUID)} for row in rows]
        for label, rows in store.items()
    }


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """What goes to the channel layer (the edge: sockets and the dispatcher)."""
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "publish", lambda group, message: sent.append((group, message)))
    return sent


@pytest.fixture
def snapshot(world: World) -> Iterator[Callable[[], None]]:
    """Puts the store back as the world left it (SQLite's online backup, both ways)."""
    connection.ensure_connection()
    saved = sqlite3.connect(":memory:")
    connection.connection.backup(saved)

    def restore() -> None:
        saved.backup(connection.connection)

    yield restore
    saved.close()


def _served(
    batch: list[Any],
    published: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], list[tuple[str, int, str]]]:
    published.clear()
    caplog.clear()
    answers = lane._serve_together(batch)
    first = answers[0]
    assert isinstance(first, HttpResponse), first
    answer = json.loads(first.content)
    assert first.status_code == 200, answer
    for other in answers[1:]:
        assert isinstance(other, HttpResponse) and other.status_code == 200
    logged = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    return answer, list(published), logged


def _once_and_twice(
    name: str,
    lead: AgentClient,
    world: World,
    restore: Callable[[], None],
    published: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Outcome, Outcome]:
    """The tool run once; the store put back; the tool served twice by a replayed batch."""
    caplog.set_level(logging.DEBUG)
    arguments = ARGUMENTS[name](world)

    def tool_request() -> Any:
        return _request(lead, world, f"/v1/tools/{name}", arguments)

    def retry() -> Any:  # answered from the original; it fails inside its atomic block first
        return _request(lead, world, "/v1/messages", world.stored_send)

    # One run: the tool alone, then the retry alone (each its own transaction).
    answer, once_published, once_logged = _served([tool_request()], published, caplog)
    _, retry_published, retry_logged = _served([retry()], published, caplog)
    once = Outcome(answer, _store(), once_published + retry_published, once_logged + retry_logged)
    restore()

    # The same two requests in one shared commit: the tool runs, the retry abandons the
    # optimistic commit, and the batch is served again, each request in a savepoint.
    runs: list[Any] = []  # the arguments of each run (the retry is a send_message too)
    tool = TOOLS[name]

    def counted(caller: Any, args: Any) -> Any:
        runs.append(args)
        return tool.run(caller, args)

    monkeypatch.setitem(TOOLS, name, dataclasses.replace(tool, run=counted))
    replays: list[int] = []
    in_savepoints = lane._serve_in_savepoints

    def replayed(requests: list[Any]) -> Any:
        replays.append(len(requests))
        return in_savepoints(requests)

    monkeypatch.setattr(lane, "_serve_in_savepoints", replayed)
    answer, twice_published, twice_logged = _served([tool_request(), retry()], published, caplog)
    twice = Outcome(answer, _store(), twice_published, twice_logged)

    ours = tool.schema.model_validate(arguments)
    assert replays == [2] and runs.count(ours) == 2, "the batch was not served twice"
    return once, twice


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_tool_served_twice_by_a_replayed_shared_commit_leaves_what_one_run_leaves(
    name: str,
    lead: AgentClient,
    world: World,
    snapshot: Callable[[], None],
    published: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    once, twice = _once_and_twice(name, lead, world, snapshot, published, caplog, monkeypatch)

    assert twice.answer == once.answer
    assert _without_notice_ids(twice.store) == _without_notice_ids(once.store)
    assert sorted(map(repr, twice.published)) == sorted(map(repr, once.published))
    assert twice.logged == once.logged


def test_an_effect_outside_the_commit_is_caught(
    lead: AgentClient,
    world: World,
    snapshot: Callable[[], None],
    published: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The comparison can fail: a tool that publishes or logs at once does it twice."""
    tool: Tool = TOOLS["set_status"]

    def at_once(caller: Any, args: Any) -> Any:
        events.publish("somewhere", {"type": "agent.wake"})
        logging.getLogger("pocolobby.test").info("set a status")
        return tool.run(caller, args)

    monkeypatch.setitem(TOOLS, "set_status", dataclasses.replace(tool, run=at_once))

    once, twice = _once_and_twice(
        "set_status", lead, world, snapshot, published, caplog, monkeypatch
    )

    assert once.published.count(("somewhere", {"type": "agent.wake"})) == 1
    assert twice.published.count(("somewhere", {"type": "agent.wake"})) == 2
    assert len(twice.logged) == len(once.logged) + 1
    assert twice.answer == once.answer  # only the effects outside the store differ
