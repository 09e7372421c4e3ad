from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from lobbies.actions import operator
from lobbies.actions.activity import forget_msg_presence
from lobbies.models import Agent, Lobby


@dataclass
class AgentClient:
    """An agent as the API sees it: its row, its token and an HTTP client."""

    agent: Agent
    token: str
    client: Client

    def call(self, tool: str, **arguments: Any) -> tuple[int, dict[str, Any]]:
        response = self.client.post(
            f"/v1/tools/{tool}",
            data=json.dumps(arguments),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
        )
        return response.status_code, response.json()

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        status, body = self.call(tool, **arguments)
        assert status == 200, body
        return body

    def send(self, to: str, content: str, request_id: str, **options: Any) -> dict[str, Any]:
        return self.ok(
            "send_message", to=to, content=content, client_request_id=request_id, **options
        )


@pytest.fixture(autouse=True)
def _fresh_msg_presence() -> None:
    """Each test's database starts with no msg presence, so neither does this process."""
    forget_msg_presence()


@pytest.fixture
def lobby(db: None) -> Lobby:
    return operator.create_lobby("my-team")


@pytest.fixture
def make_agent(lobby: Lobby) -> Callable[..., AgentClient]:
    def make(name: str, lobby_name: str = "my-team", **options: Any) -> AgentClient:
        agent, token = operator.add_agent(lobby_name, name, **options)
        return AgentClient(agent, token, Client())

    return make


@pytest.fixture
def lead(make_agent: Callable[..., AgentClient]) -> AgentClient:
    return make_agent("lead", manage_rooms=True)


@pytest.fixture
def backend(make_agent: Callable[..., AgentClient]) -> AgentClient:
    return make_agent("backend")


@pytest.fixture(scope="session", autouse=True)
def _no_stray_sessions_on_the_test_database(
    django_db_setup: None, django_db_blocker: Any
) -> Iterator[None]:
    """Async tests run database work on their event loop's pool threads; each thread opens
    its own connection, and pytest-asyncio discards the loop (and its threads) without
    closing them. PostgreSQL then refuses to drop the test database at the end ("being
    accessed by other users"). Set up after `django_db_setup`, so torn down before it: end
    those sessions of this run first."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(autouse=True)
def _fresh_process_memory() -> None:
    """Each test starts like a fresh broker process: database rows (and their primary keys)
    are rolled back between tests, so counts remembered for a lobby id must go too. Each
    test's event loop is new as well, so the stream's fact queue (whose lock belongs to the
    loop that first used it) starts anew."""
    # local: a conftest loads before pytest-django sets Django up; these read the settings
    from board import refresh
    from board.strip import SETTLED
    from lobbies.push import consumers

    SETTLED.forget()
    refresh.forget()
    consumers.FACTS = consumers.FactQueue()


TESTS = Path(__file__).resolve().parent
# The marker scheme (docs/DECISIONS.md, "Test markers"), applied by folder so that a new test
# file gets its markers from where it lives:
# - browser: tests/browser/ (drives Chromium);
# - soak: tests/benchmarks/ (minutes-long load and chaos runs);
# - server: starts real server subprocesses: marked `slow` or `server` by hand, uses the broker
#   fixtures of tests/server_fixtures.py, or is a browser or soak test; every `server` test is
#   also `slow`, the old name, so `-m "not slow"` still means "in process only";
# - vendor_neutral: cannot depend on the database vendor, so the PostgreSQL pass deselects it:
#   tests/browser/, tests/docs/, tests/bridge/ (the bridge imports no Django, and the brokers
#   it talks to run the embedded SQLite store whatever DATABASE_URL says, tests/server.py),
#   tests/deploy/ (its brokers pick their own store: SQLite, or PostgreSQL for scale-out),
#   and in tests/cli/ whatever does not use the test database (parsing, and the CLI against
#   such brokers). Everything with the test database elsewhere stays in both passes.
SERVER_FIXTURES = frozenset({"broker", "broker_factory", "module_broker"})
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "live_server"}
)
VENDOR_NEUTRAL_FOLDERS = frozenset({"browser", "docs", "bridge", "deploy"})


def _folder(item: pytest.Item) -> str:
    """The folder under tests/ that `item` lives in ("" for tests/ itself)."""
    parts = Path(item.path).resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 else ""


def _uses_the_test_database(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("django_db") is not None or bool(fixtures & DATABASE_FIXTURES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by where it lives before any other hook runs (so before `-m` selects)."""
    for item in items:
        folder = _folder(item)
        fixtures = set(getattr(item, "fixturenames", ()))
        if folder == "browser":
            item.add_marker(pytest.mark.browser)
        if folder == "benchmarks":
            item.add_marker(pytest.mark.soak)
        if (
            folder in {"browser", "benchmarks"}
            or item.get_closest_marker("slow") is not None
            or item.get_closest_marker("server") is not None
            or fixtures & SERVER_FIXTURES
        ):
            item.add_marker(pytest.mark.server)
            item.add_marker(pytest.mark.slow)
        if folder in VENDOR_NEUTRAL_FOLDERS or (
            folder == "cli" and not _uses_the_test_database(item)
        ):
            item.add_marker(pytest.mark.vendor_neutral)


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times this thread's connection committed."""
    counted: list[int] = []
    connection.ensure_connection()
    commit = connection._commit  # type: ignore[attr-defined]

    def counting() -> None:
        counted.append(1)
        commit()

    monkeypatch.setattr(connection, "_commit", counting)
    return counted
