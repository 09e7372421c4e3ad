"""The published contract, fuzzed: schemathesis runs every /v1 operation of the OpenAPI document
a live broker serves (`GET /v1/openapi.json`) against that broker, a real `pocolobby serve`
subprocess: its CLI, every phase, bounded, in two passes (the agents' operations with an
agent token, then the operator's with the admin token).

Every answer must be documented: no 5xx, a documented status, a body that conforms to that
status's schema (success models from lobbies/api/answers.py; every error `{"error": {"code",
"message"}}` with one of the status's documented codes), a 405 with its `Allow` header, input
the schema forbids refused. Random input mostly gets refusals, so a tour first calls the
operations the way an agent, its bridge and the operator do, with valid arguments, and checks
each real answer against the document with schemathesis's own checks.

On PostgreSQL (DATABASE_URL=postgres://...) the broker runs on a database of its own there.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schemathesis
from schemathesis import Case
from schemathesis.specs.openapi.checks import positive_data_acceptance
from schemathesis.specs.openapi.schemas import OpenApiSchema

from lobbies.wire.frames import GENERATION_HEADER, RUNTIME_HEADER
from tests.bridge_client import Bridge, payload
from tests.server import Broker

pytestmark = pytest.mark.slow

LOBBY = "contract"
# Examples per operation in the fuzzing phase: about 60 operations in well under 3 minutes.
MAX_EXAMPLES = 5
SEED = 1801

# Left out, with the reason: `positive_data_acceptance` expects every request that fits the
# schema to succeed, but a schema cannot say every rule (a Line has no control characters;
# `query` only with `view: history`; a recipient must exist), and those are refused with 400
# as documented. Every other check runs, `negative_data_rejection` included: input the
# schema forbids must be refused.
EXCLUDED = ["positive_data_acceptance"]


@pytest.fixture(scope="module")
def database_url() -> Iterator[str | None]:
    """A database of the broker's own on the suite's PostgreSQL server; None on SQLite."""
    suite = os.environ.get("DATABASE_URL", "")
    if not suite.startswith(("postgres://", "postgresql://")):
        yield None
        return
    server = suite.rsplit("/", 1)[0]
    name = f"pocolobby_contract_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{server}/{name}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


class Live:
    """The broker, its tokens, and which token each operation's security asks for."""

    def __init__(self, broker: Broker, configs_dir: Path) -> None:
        self.broker = broker
        self.agents = broker.provision(LOBBY, ["alpha", "beta"], configs_dir)
        broker.cli_ok(
            "agent", "permissions", LOBBY, "alpha", "--broadcast", "yes", "--manage-rooms", "yes"
        )
        self.admin_token = broker.admin_token

    def headers(self, case: Case) -> dict[str, str]:
        security = case.operation.definition.raw.get("security", [])
        names = {name for requirement in security for name in requirement}
        if "adminToken" in names:
            return {"Authorization": f"Bearer {self.admin_token}"}
        if "agentToken" in names:
            return {"Authorization": f"Bearer {self.agents['alpha'].token}"}
        return {}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, database_url: str | None) -> Iterator[Live]:
    env = {"DATABASE_URL": database_url} if database_url else {}
    broker = Broker(tmp_path_factory.mktemp("contract-broker"), env=env).start()
    try:
        yield Live(broker, tmp_path_factory.mktemp("contract-configs"))
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def contract(live: Live) -> OpenApiSchema:
    """The document as the live broker serves it, loaded by schemathesis."""
    return schemathesis.openapi.from_url(f"{live.broker.url}/v1/openapi.json")


def test_the_tour_answers_as_documented(contract: OpenApiSchema, live: Live) -> None:
    """Each operation called as an agent and the operator do, every answer validated."""
    beta = live.agents["beta"].token
    call = functools.partial(_call, contract, live)
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()

    assert call("GET", "/v1/health")["ok"] is True
    assert call("GET", "/v1/openapi.json")["openapi"] == "3.1.0"
    assert call("GET", "/v1/tools")["tools"]
    sent = call(
        "POST", "/v1/messages", body={"to": "beta", "content": "hi", "client_request_id": "t1"}
    )
    call(
        "POST",
        "/v1/tools/send_message",
        body={
            "to": "beta",
            "content": "see x",
            "client_request_id": "t2",
            "kind": "request",
            "fields": {"commit": "abcd123", "files": ["x.py"]},
            "reply_to": sent["message_id"],
            "correlation_id": "c1",
            "notify_when_seen": True,
        },
    )
    call("POST", "/v1/tools/create_room", body={"room_id": "ops", "members": ["alpha", "beta"]})
    call(
        "POST",
        "/v1/tools/send_room_message",
        body={
            "room_id": "ops",
            "content": "room",
            "client_request_id": "t3",
            "addressed_to": ["beta"],
        },
    )
    call("POST", "/v1/tools/broadcast", body={"content": "all", "client_request_id": "t4"})
    waiting = call(
        "POST",
        "/v1/tools/send_message",
        body={
            "to": "beta",
            "content": "later",
            "client_request_id": "t5",
            "deliver_at": later,
        },
    )
    history = call("GET", "/v1/messages", query={"view": "history", "limit": 50})
    assert len(history["messages"]) == 5 and history["messages"][0]["recipients"]
    call("POST", "/v1/tools/get_messages", body={"view": "history", "query": "room"})
    inbox = call("GET", "/v1/messages", query={"limit": 2}, token=beta)
    assert inbox["messages"][0]["delivery"] and inbox["next_cursor"]
    call("GET", "/v1/messages", query={"cursor": inbox["next_cursor"]}, token=beta)
    ids = [m["message_id"] for m in inbox["messages"]]
    call("POST", "/v1/messages/acknowledge", body={"message_ids": [*ids, 999_999]}, token=beta)
    call("POST", "/v1/tools/acknowledge_messages", body={"message_ids": ids}, token=beta)
    call("POST", "/v1/me/status", body={"status": "on the tour"})
    call("POST", "/v1/me/owner-requests", body={"count": 1, "line": "review"})
    call("POST", "/v1/tools/set_status", body={"status": ""})
    call("POST", "/v1/tools/set_owner_requests", body={"count": 0})
    call(
        "PUT",
        "/v1/usage",
        body={
            "five_hour": {"used_percentage": 10, "resets_at": later},
            "seven_day": {"used_percentage": 20, "resets_at": later},
        },
    )
    call("POST", "/v1/turns", body={"event": "start"})
    call("POST", "/v1/turns", body={"event": "end"})
    call(
        "PUT",
        "/v1/tokens",
        body={
            "days": [
                {
                    "day": datetime.now(UTC).date().isoformat(),
                    "session_id": "s1",
                    "input_tokens": 5,
                }
            ]
        },
    )
    agents = call("GET", "/v1/agents")["agents"]
    assert any(a["usage"] for a in agents)
    call("POST", "/v1/tools/list_agents", body={})
    schedule = call(
        "POST",
        "/v1/tools/schedule_message",
        body={
            "client_request_id": "s1",
            "to": "beta",
            "content": "daily",
            "time_zone": "Europe/Berlin",
            "times": ["09:00"],
            "weekdays": [1, 2],
        },
    )
    assert call("POST", "/v1/tools/list_scheduled", body={})["messages"]
    call(
        "POST",
        "/v1/tools/update_scheduled",
        body={
            "message_id": waiting["message_id"],
            "content": "later still",
        },
    )
    call("POST", "/v1/tools/cancel_scheduled", body={"schedule_id": schedule["schedule_id"]})
    call("POST", "/v1/tools/cancel_scheduled", body={"message_id": waiting["message_id"]})
    call("POST", "/v1/tools/list_rooms", body={})
    call("POST", "/v1/tools/set_room_members", body={"room_id": "ops", "members": ["alpha"]})
    call("POST", "/v1/tools/add_room_members", body={"room_id": "ops", "members": ["beta"]})
    call("POST", "/v1/tools/remove_room_members", body={"room_id": "ops", "members": ["beta"]})
    call("POST", "/v1/tools/delete_room", body={"room_id": "ops"})
    call("POST", "/v1/tools/rest_agents", body={"agent_ids": ["beta"], "rest": True, "at": later})
    context = call("POST", "/v1/tools/get_context", body={}, token=beta)
    assert context["uncertain"]["total"] >= 1
    assert call("POST", "/v1/tools/read_checkpoint", body={})["checkpoint"] is None

    # A bridge's session: bound over the stream, then ready and a checkpoint over HTTP.
    runtime = asyncio.run(_bind(live.broker.url, beta))
    bound = {"token": beta, "extra": runtime.headers}
    call("POST", "/v1/me/ready", body={"nonce": runtime.nonce}, **bound)
    call("POST", "/v1/tools/ready", body={"nonce": runtime.nonce}, **bound)
    saved = call(
        "POST",
        "/v1/tools/save_checkpoint",
        body={
            "expected_revision": 0,
            "checkpoint": {"objective": "tour", "next": ["fuzz"]},
            "covers_receipts_through": context["receipt_sequence"],
            "acknowledge_message_ids": ids,
        },
        **bound,
    )
    assert saved["revision"] == 1 and saved["acknowledged"] == ids
    assert call("POST", "/v1/tools/read_checkpoint", body={}, token=beta)["checkpoint"]
    resumed = call("POST", "/v1/tools/get_context", body={}, token=beta)
    assert resumed["runtime"]["ready"] and resumed["checkpoint"]["revision"] == 1

    # The operator, on a lobby of its own so the fuzzing keeps its agents.
    call("GET", "/v1/admin/lobbies")
    call("POST", "/v1/admin/lobbies", body={"name": "ops-tour"})
    lobby = {"lobby": "ops-tour"}
    both = {"lobby": "ops-tour", "agent_id": "gamma"}
    call(
        "POST",
        "/v1/admin/lobbies/{lobby}/agents",
        path_parameters=lobby,
        body={
            "agent_id": "gamma",
            "description": "g",
            "manage_rooms": True,
        },
    )
    call(
        "POST",
        "/v1/admin/lobbies/{lobby}/agents",
        path_parameters=lobby,
        body={"agent_id": "delta"},
    )
    call("GET", "/v1/admin/lobbies/{lobby}/agents", path_parameters=lobby)
    agent = "/v1/admin/lobbies/{lobby}/agents/{agent_id}"
    call("POST", f"{agent}/role", path_parameters=both, body={"role": "You test."})
    call("POST", f"{agent}/permissions", path_parameters=both, body={"broadcast": True})
    for action in (
        "rest",
        "resume",
        "retry-notifications",
        "cancel-scheduled",
        "disable",
        "enable",
        "rotate",
        "reset-runtime",
    ):
        call("POST", f"{agent}/{action}", path_parameters=both)
    call("DELETE", agent, path_parameters={"lobby": "ops-tour", "agent_id": "delta"})
    team = {
        "lobby": "ops-tour",
        "agents": {"gamma": {"role": "You test.", "permissions": ["broadcast"]}, "eps": {}},
        "rooms": {"crew": {"members": ["gamma", "eps"]}},
    }
    planned = call("POST", "/v1/admin/team", body={"manifest": team, "dry_run": True})
    applied = call("POST", "/v1/admin/team", body={"manifest": team, "prune": True})
    assert applied["changes"] == planned["changes"] and applied["enrollments"]
    call("POST", "/v1/admin/lobbies/{lobby}/delivery", path_parameters=lobby, body={"paused": True})
    call(
        "POST", "/v1/admin/lobbies/{lobby}/delivery", path_parameters=lobby, body={"paused": False}
    )
    parked = call(
        "POST",
        "/v1/tools/send_message",
        body={
            "to": "beta",
            "content": "parked",
            "client_request_id": "t6",
            "deliver_at": later,
        },
    )
    call(
        "POST",
        "/v1/admin/lobbies/{lobby}/cancel-scheduled",
        path_parameters={"lobby": LOBBY},
        body={"message_id": parked["message_id"]},
    )
    asked = call(
        "POST",
        "/v1/messages",
        body={"to": "owner", "content": "SSO?", "client_request_id": "q1", "kind": "question"},
        token=beta,
    )
    owner_messages = "/v1/admin/lobbies/{lobby}/owner-messages"
    replied = call(
        "POST",
        owner_messages,
        path_parameters={"lobby": LOBBY},
        body={"reply_to": asked["message_id"], "content": "yes", "client_request_id": "o1"},
    )
    assert replied["to"] == "beta" and replied["answered_before"] is None
    call(
        "POST",
        owner_messages,
        path_parameters={"lobby": LOBBY},
        body={"to": "beta", "content": "thanks", "important": True, "client_request_id": "o2"},
    )
    assert call("GET", "/v1/admin/status")["lobbies"]
    call("GET", "/v1/admin/status", query={"lobby": LOBBY})
    call("POST", "/v1/admin/accounts", body={"email": "owner@example.com"})
    call("POST", "/v1/admin/accounts", body={"email": "owner@example.com", "enabled": True})
    call(
        "PUT",
        "/v1/admin/lobbies/{lobby}/owner",
        path_parameters=lobby,
        body={"email": "owner@example.com"},
    )
    call(
        "POST",
        "/v1/admin/lobbies/{lobby}/repositories",
        path_parameters=lobby,
        body={"repository": "acme/notes"},
    )
    call(
        "DELETE",
        "/v1/admin/lobbies/{lobby}/repositories",
        path_parameters=lobby,
        body={"repository": "acme/notes"},
    )
    call("POST", "/v1/admin/settings-ticket")
    call("DELETE", "/v1/admin/lobbies/{lobby}", path_parameters=lobby)


# Each run of schemathesis: which operations, with which token. The agents' operations run
# first: the operator's run may disable, rotate or delete what it finds (schemathesis reuses
# names it has seen in answers), which would leave the agents' run only 401s.
RUNS = {
    "agent": ("--exclude-path-regex", "^/v1/admin/"),
    "admin": ("--include-path-regex", "^/v1/admin/"),
}


def _schemathesis(live: Live, token: str, selection: tuple[str, ...], reports: Path) -> None:
    """Every phase (examples, coverage, fuzzing, stateful), bounded, every check but one."""
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "--no-color",
            "run",
            f"{live.broker.url}/v1/openapi.json",
            *selection,
            "--header",
            f"Authorization: Bearer {token}",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--exclude-checks",
            ",".join(EXCLUDED),
            "--report",
            "junit",
            "--report-dir",
            str(reports),
        ],
        cwd=reports,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20_000:]
    selected = re.search(r"Operations:\s+(\d+) selected / (\d+) total", output)
    assert selected and int(selected.group(1)) > 0, output[-5_000:]
    # The token must have held for the whole run, or it tested only the refusal of a token.
    assert "Authentication failed" not in output, output[-5_000:]


@pytest.mark.parametrize("run", list(RUNS))
def test_every_operation_keeps_its_documented_contract(
    live: Live, run: str, tmp_path: Path
) -> None:
    token = live.admin_token if run == "admin" else live.agents["alpha"].token
    _schemathesis(live, token, RUNS[run], tmp_path)


@dataclass(frozen=True)
class Runtime:
    runtime_id: str
    generation: int
    nonce: str

    @property
    def headers(self) -> dict[str, str]:
        return {RUNTIME_HEADER: self.runtime_id, GENERATION_HEADER: str(self.generation)}


async def _bind(url: str, token: str) -> Runtime:
    """A new bridge process claims the agent: its runtime, generation and bootstrap nonce."""
    async with await Bridge.connect(url, token) as bridge:
        welcome, bootstrap = await bridge.bootstrapped()
        return Runtime(bridge.runtime, welcome["generation"], payload(bootstrap)["nonce"])


def _call(
    contract: OpenApiSchema,
    live: Live,
    method: str,
    path: str,
    token: str | None = None,
    extra: dict[str, str] | None = None,
    **parts: Any,
) -> Any:
    """One request through schemathesis, every check run on its answer; it must succeed."""
    case = contract[path][method].Case(**parts)
    headers = live.headers(case)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    headers.update(extra or {})
    response = case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])
    assert response.status_code < 300, (method, path, response.status_code, response.text)
    return response.json()
