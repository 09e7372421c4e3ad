"""The page's interface to the model-written half: opening the dashboard asks the serve
loop (pocolobby/loops.py) for due notes checks and a summary, which it runs on its own
threads; the picture is the last good summary and plain problems.

The tests that drive the loop see the rows from its threads, so they commit
(`transaction=True`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import respx
from asgiref.sync import sync_to_async

from board import notes, refresh
from board.actions import set_appearance, set_notes_source
from board.models import AttemptOutcome, NotesSnapshot, NotesSource, SummaryAttempt
from board.summaries import runs
from console.actions.accounts import approve_repository
from console.actions.lobby_settings import Actor, create_room
from lobbies.actions import operator
from lobbies.models import Lobby
from pocolobby import loops
from tests.board.dashboard_helpers import operator_client
from tests.board.notes_fakes import (
    REPOSITORY,
    FakeClaude,
    FakeGitHub,
    api_error,
    message,
)
from tests.conftest import AgentClient

START = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
NOTES = {"notes/team.md": "# Team\nlead reviews; backend sweeps.\n"}


# Loop-driven tests commit, so that the loop's threads see their rows.
serve_loop = pytest.mark.django_db(transaction=True)


@pytest.fixture
def workers() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(loops.DASHBOARD_WORKERS, thread_name_prefix="dashboard")
    yield pool
    pool.shutdown(wait=True)


def loop_pass(workers: ThreadPoolExecutor) -> list[refresh.RefreshOutcome]:
    """One pass of the serve loop's dashboard work, its runs waited for."""
    return [run.result(timeout=20) for run in loops.start_dashboard_work(workers)]


def with_notes(lobby: Lobby, github: FakeGitHub) -> NotesSource:
    approve_repository(lobby.name, REPOSITORY)
    create_room(Actor.operator(), lobby.pk, "core", ["lead"])
    set_notes_source(Actor.operator(), lobby.pk, "core", REPOSITORY, "main", ["notes/"])
    github.push(NOTES)
    return NotesSource.objects.get(room__lobby=lobby)


@serve_loop
def test_opening_the_dashboard_asks_the_loop_to_fetch_due_notes_then_summarize(
    lobby: Lobby,
    lead: AgentClient,
    backend: AgentClient,
    github: FakeGitHub,
    claude: FakeClaude,
    workers: ThreadPoolExecutor,
) -> None:
    source = with_notes(lobby, github)
    threads = {t.ident for t in threading.enumerate()}

    assert operator_client().get(f"/{lobby.name}/").status_code == 200

    assert {t.ident for t in threading.enumerate()} == threads  # the page started nothing
    assert github.commit_route.call_count == 0 and claude.route.call_count == 0
    [outcome] = loop_pass(workers)
    assert outcome.fetches[source.pk].status == "stored" and outcome.summary == "succeeded"
    assert NotesSnapshot.objects.get(source=source).commit == github.refs["main"]
    assert claude.route.call_count == 1
    document = FakeClaude.document(claude.bodies[0])
    assert document["notes"][0]["files"][0]["content"] == NOTES["notes/team.md"]
    picture = refresh.picture_of(lobby)
    assert set(picture.agents) == {"lead", "backend"}
    assert picture.sources[0].commit == github.refs["main"] and picture.problems == []


@serve_loop
def test_the_live_agents_part_asks_too_and_an_unopened_dashboard_costs_nothing(
    lobby: Lobby, lead: AgentClient, claude: FakeClaude, workers: ThreadPoolExecutor
) -> None:
    assert loop_pass(workers) == []  # nobody looked: no summary
    response = operator_client().get(f"/{lobby.name}/parts/agents", HTTP_HX_REQUEST="true")
    assert response.status_code == 200

    [outcome] = loop_pass(workers)

    assert outcome.summary == "succeeded" and claude.route.call_count == 1


@serve_loop
def test_polling_starts_nothing_new_until_work_can_be_due(
    lobby: Lobby,
    lead: AgentClient,
    github: FakeGitHub,
    claude: FakeClaude,
    time_machine: Any,
    workers: ThreadPoolExecutor,
) -> None:
    time_machine.move_to(START, tick=False)
    with_notes(lobby, github)
    refresh.dashboard_opened(lobby.pk)
    assert len(loop_pass(workers)) == 1
    lead.send("lead", "note to self", "r1", kind="report")

    for _ in range(5):
        refresh.dashboard_opened(lobby.pk)  # the page polls every 10 s
        assert loop_pass(workers) == []

    assert (github.commit_route.call_count, claude.route.call_count) == (1, 1)
    time_machine.shift(timedelta(minutes=11))
    refresh.dashboard_opened(lobby.pk)
    assert len(loop_pass(workers)) == 1
    assert github.commit_route.call_count == 2  # answered 304
    assert github.commit_route.calls[-1].response.status_code == 304
    assert claude.route.call_count == 2  # the new report changed the input


def test_new_notes_are_summarized_without_waiting_out_the_unchanged_cache(
    lobby: Lobby, lead: AgentClient, github: FakeGitHub, claude: FakeClaude, time_machine: Any
) -> None:
    time_machine.move_to(START, tick=False)
    source = with_notes(lobby, github)
    refresh.run_refresh(lobby.pk)
    time_machine.shift(timedelta(minutes=11))
    # Nothing changed: the summarizer finds the input unchanged and caches that finding.
    outcome = refresh.run_refresh(lobby.pk)
    assert outcome.summary == "unchanged"
    assert outcome.fetches[source.pk].status == "unchanged"
    github.push({"notes/team.md": "# Team\nlead ships.\n"})
    time_machine.shift(timedelta(minutes=1))
    assert refresh.run_refresh(lobby.pk).fetches == {}  # the source is not due yet

    time_machine.shift(notes.NOTES_INTERVAL)
    outcome = refresh.run_refresh(lobby.pk)

    assert outcome.fetches[source.pk].status == "stored"
    assert outcome.summary == "succeeded"
    assert "lead ships" in FakeClaude.document(claude.bodies[-1])["notes"][0]["files"][0]["content"]


def test_the_picture_shows_only_agents_still_enabled_and_not_hidden(
    lobby: Lobby, lead: AgentClient, backend: AgentClient, make_agent: Any, claude: FakeClaude
) -> None:
    make_agent("ops")
    refresh.run_refresh(lobby.pk)
    assert set(refresh.picture_of(lobby).agents) == {"lead", "backend", "ops"}

    set_appearance(Actor.operator(), lobby.pk, "backend", "", "", True)
    operator.disable_agent(lobby.name, "ops")

    assert set(refresh.picture_of(lobby).agents) == {"lead"}


@serve_loop
def test_missing_secrets_are_named(
    lobby: Lobby,
    lead: AgentClient,
    github: FakeGitHub,
    settings: Any,
    workers: ThreadPoolExecutor,
) -> None:
    settings.GITHUB_TOKEN = ""
    settings.ANTHROPIC_API_KEY = ""
    assert refresh.picture_of(lobby).problems == [runs.MISSING_KEY]

    with_notes(lobby, github)
    refresh.dashboard_opened(lobby.pk)
    loop_pass(workers)

    assert refresh.picture_of(lobby).problems == [
        "POCOLOBBY_GITHUB_TOKEN is not set: notes cannot be read",
        "ANTHROPIC_API_KEY is not set: summaries cannot be written",
    ]
    assert github.commit_route.call_count == 0
    assert not SummaryAttempt.objects.exists()


def test_a_failed_fetch_is_shown_on_its_source(
    lobby: Lobby, lead: AgentClient, github: FakeGitHub, claude: FakeClaude
) -> None:
    source = with_notes(lobby, github)
    github.commit_route.side_effect = None
    github.commit_route.return_value = httpx.Response(503, json={"message": "unavailable"})

    outcome = refresh.run_refresh(lobby.pk)

    assert outcome.fetches[source.pk].status == "failed"
    [status] = refresh.picture_of(lobby).sources
    assert status.problem == "GitHub answered 503 for the commit"
    assert status.commit == "" and status.fetched_at is None


def test_a_deleted_lobby_is_a_quiet_no_op(lobby: Lobby, lead: AgentClient) -> None:
    lobby_id = lobby.pk
    operator.delete_lobby(lobby.name)

    assert refresh.run_refresh(lobby_id) == refresh.RefreshOutcome()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_page_returns_at_once_while_the_serve_loop_summarizes(
    router: respx.MockRouter, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real loop (`run_dashboard_work`): the page answers before the model does, a
    second opening starts no second run, and the summary lands once the model answers."""
    monkeypatch.setattr(loops, "DASHBOARD_SECONDS", 0.02)
    lobby = await sync_to_async(operator.create_lobby)("bg-team")
    await sync_to_async(operator.add_agent)(lobby.name, "lead")
    claude = FakeClaude(router)
    asked, release = threading.Event(), threading.Event()

    def slow_answer(body: dict[str, Any]) -> httpx.Response:
        asked.set()
        assert release.wait(10)
        return message(
            body, json.dumps({"agents": [{"agent_id": "lead", "now": "x", "next": None}]})
        )

    claude.answers.append(slow_answer)
    client = await sync_to_async(operator_client)()
    loop = asyncio.ensure_future(loops.run_dashboard_work())
    try:
        page = await sync_to_async(client.get)(f"/{lobby.name}/")
        assert page.status_code == 200  # while the model has not answered
        assert await asyncio.to_thread(asked.wait, 10)
        again = await sync_to_async(client.get)(f"/{lobby.name}/")
        assert again.status_code == 200
        await asyncio.sleep(0.1)  # passes of the loop: one run at a time per lobby
        [worker] = [t for t in threading.enumerate() if t.name.startswith("dashboard")]
        assert worker.is_alive()
        outcomes = sync_to_async(lambda: list(SummaryAttempt.objects.values_list("outcome")))
        assert await outcomes() == [(AttemptOutcome.RESERVED,)]  # claimed, not yet settled

        release.set()
        attempts = sync_to_async(lambda: list(SummaryAttempt.objects.all()))
        for _ in range(500):
            if await outcomes() != [(AttemptOutcome.RESERVED,)]:
                break
            await asyncio.sleep(0.02)
    finally:
        release.set()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop

    [attempt] = await attempts()
    assert attempt.outcome == AttemptOutcome.SUCCEEDED and claude.route.call_count == 1
    picture = await sync_to_async(refresh.picture_of)(lobby)
    assert picture.agents == {"lead": refresh.AgentSummary("x", None)}


@serve_loop
def test_background_work_never_raises_into_the_loop(
    lobby: Lobby, lead: AgentClient, claude: FakeClaude, workers: ThreadPoolExecutor
) -> None:
    claude.answers.append(api_error(401, "authentication_error", "invalid x-api-key"))

    refresh.dashboard_opened(lobby.pk)
    [outcome] = loop_pass(workers)

    assert outcome.summary == "failed"
    [attempt] = SummaryAttempt.objects.all()
    assert (attempt.outcome, attempt.error) == (
        AttemptOutcome.FAILED,
        "the Anthropic API answered 401",
    )
    assert any("(the Anthropic API answered 401)" in p for p in refresh.picture_of(lobby).problems)


@serve_loop
def test_an_opening_noted_by_one_broker_is_taken_once_by_any(
    lobby: Lobby, lead: AgentClient, claude: FakeClaude, workers: ThreadPoolExecutor
) -> None:
    """The page of one broker notes the opening in the store; another broker's loop (this
    process with its memory forgotten) takes it, and a third finds it taken."""
    assert operator_client().get(f"/{lobby.name}/").status_code == 200
    refresh.forget()  # another process: nothing of the page's broker in memory

    [outcome] = loop_pass(workers)
    refresh.forget()

    assert outcome.summary == "succeeded"
    assert loop_pass(workers) == []
    assert claude.route.call_count == 1
