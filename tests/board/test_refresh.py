"""The page's interface to the model-written half: opening the dashboard starts due notes
checks and a summary in the background; the picture is the last good summary and plain
problems."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import respx

from board import notes, refresh, summary
from board.actions import set_appearance, set_notes_source
from board.models import AttemptOutcome, NotesSnapshot, NotesSource, SummaryAttempt
from console.actions.accounts import approve_repository
from console.actions.lobby_settings import Actor, create_room
from lobbies.actions import operator
from lobbies.models import Lobby
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


def with_notes(lobby: Lobby, github: FakeGitHub) -> NotesSource:
    approve_repository(lobby.name, REPOSITORY)
    create_room(Actor.operator(), lobby.pk, "core", ["lead"])
    set_notes_source(Actor.operator(), lobby.pk, "core", REPOSITORY, "main", ["notes/"])
    github.push(NOTES)
    return NotesSource.objects.get(room__lobby=lobby)


def test_opening_the_dashboard_fetches_due_notes_then_summarizes(
    lobby: Lobby, lead: AgentClient, backend: AgentClient, github: FakeGitHub, claude: FakeClaude
) -> None:
    source = with_notes(lobby, github)

    refresh.on_dashboard_opened(lobby)  # a test's transaction keeps the work on this thread

    assert NotesSnapshot.objects.get(source=source).commit == github.refs["main"]
    assert claude.route.call_count == 1
    document = FakeClaude.document(claude.bodies[0])
    assert document["notes"][0]["files"][0]["content"] == NOTES["notes/team.md"]
    picture = refresh.picture_of(lobby)
    assert set(picture.agents) == {"lead", "backend"}
    assert picture.sources[0].commit == github.refs["main"] and picture.problems == []


def test_polling_starts_nothing_new_until_work_can_be_due(
    lobby: Lobby, lead: AgentClient, github: FakeGitHub, claude: FakeClaude, time_machine: Any
) -> None:
    time_machine.move_to(START, tick=False)
    with_notes(lobby, github)
    refresh.on_dashboard_opened(lobby)
    lead.send("lead", "note to self", "r1", kind="report")

    for _ in range(5):
        refresh.on_dashboard_opened(lobby)  # the page polls every 10 s

    assert (github.commit_route.call_count, claude.route.call_count) == (1, 1)
    time_machine.shift(timedelta(minutes=11))
    refresh.on_dashboard_opened(lobby)
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


def test_missing_secrets_are_named(
    lobby: Lobby, lead: AgentClient, github: FakeGitHub, settings: Any
) -> None:
    settings.GITHUB_TOKEN = ""
    settings.ANTHROPIC_API_KEY = ""
    assert refresh.picture_of(lobby).problems == [summary.MISSING_KEY]

    with_notes(lobby, github)
    refresh.on_dashboard_opened(lobby)

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
def test_the_page_returns_at_once_while_the_summary_runs_in_the_background(
    router: respx.MockRouter, settings: Any
) -> None:
    lobby = operator.create_lobby("bg-team")
    operator.add_agent(lobby.name, "lead")
    claude = FakeClaude(router)
    release = threading.Event()

    def slow_answer(body: dict[str, Any]) -> httpx.Response:
        assert release.wait(10)
        return message(
            body, json.dumps({"agents": [{"agent_id": "lead", "now": "x", "next": None}]})
        )

    claude.answers.append(slow_answer)

    refresh.on_dashboard_opened(lobby)  # returns while the model has not answered
    refresh.on_dashboard_opened(lobby)  # one at a time per lobby: no second run
    worker = next(t for t in threading.enumerate() if t.name == f"dashboard-{lobby.pk}")
    assert worker.daemon and worker.is_alive()
    assert not SummaryAttempt.objects.exists()

    release.set()
    worker.join(10)

    assert not worker.is_alive() and claude.route.call_count == 1
    assert SummaryAttempt.objects.get().outcome == AttemptOutcome.SUCCEEDED
    assert refresh.picture_of(lobby).agents == {"lead": refresh.AgentSummary("x", None)}


def test_background_work_never_raises_into_the_page(
    lobby: Lobby, lead: AgentClient, claude: FakeClaude
) -> None:
    claude.answers.append(api_error(401, "authentication_error", "invalid x-api-key"))

    refresh.on_dashboard_opened(lobby)

    [attempt] = SummaryAttempt.objects.all()
    assert (attempt.outcome, attempt.error) == (
        AttemptOutcome.FAILED,
        "the Anthropic API answered 401",
    )
    assert any("(the Anthropic API answered 401)" in p for p in refresh.picture_of(lobby).problems)
