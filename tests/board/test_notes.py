"""Notes at one commit per source: conditional checks, reuse by SHA, and failures that keep
the last snapshot, against a fake GitHub that speaks its REST API's JSON."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
import time_machine
from django.utils import timezone

from board import notes, refresh
from board.actions import set_notes_source
from board.models import NotesSnapshot, NotesSource
from console.actions.accounts import approve_repository, withdraw_repository
from console.actions.lobby_settings import Actor, create_room
from lobbies.actions import operator
from lobbies.models import Lobby
from tests.board.notes_fakes import GITHUB, REPOSITORY, FakeGitHub, git_blob_sha
from tests.conftest import AgentClient

NOTES = {
    "notes/a.md": "# Lead\nReviewing the send path.\n",
    "notes/sub/b.md": "# Backend\nWriting the retention sweep.\n",
    "notes/diagram.png": "not notes",
    "PLAN.md": "1. ship the dashboard\n",
    "src/app.py": "print('not notes')\n",
}


@pytest.fixture
def source(lobby: Lobby, lead: AgentClient, backend: AgentClient) -> NotesSource:
    approve_repository(lobby.name, REPOSITORY)
    create_room(Actor.operator(), lobby.pk, "core", ["lead", "backend"])
    set_notes_source(Actor.operator(), lobby.pk, "core", REPOSITORY, "main", ["notes/", "PLAN.md"])
    return NotesSource.objects.get(room__lobby=lobby, room__room_id="core")


def snapshot_of(source: NotesSource) -> NotesSnapshot:
    return NotesSnapshot.objects.get(source=source)


def test_first_fetch_stores_every_named_file_at_the_resolved_commit(
    github: FakeGitHub, source: NotesSource
) -> None:
    commit = github.push(NOTES)

    result = notes.fetch_source(source.pk)

    assert result.status == "stored" and result.commit == commit and result.downloaded == 3
    snapshot = snapshot_of(source)
    assert snapshot.commit == commit
    assert snapshot.etag == github.etag(commit)
    # The directory's .md files in path order, then the named file; nothing else.
    assert [(f["path"], f["content"], f["truncated"]) for f in snapshot.files] == [
        ("notes/a.md", NOTES["notes/a.md"], False),
        ("notes/sub/b.md", NOTES["notes/sub/b.md"], False),
        ("PLAN.md", NOTES["PLAN.md"], False),
    ]
    assert [f["sha"] for f in snapshot.files] == [
        git_blob_sha(NOTES[p]) for p in ("notes/a.md", "notes/sub/b.md", "PLAN.md")
    ]
    first = github.commit_route.calls[0].request
    assert first.headers["Authorization"] == "Bearer ghp_test-read-only"
    assert "If-None-Match" not in first.headers
    source.refresh_from_db()
    assert source.last_error == "" and source.last_checked_at is not None


def test_an_unchanged_ref_is_answered_304_and_reads_no_tree_or_blob(
    github: FakeGitHub, source: NotesSource
) -> None:
    commit = github.push(NOTES)
    notes.fetch_source(source.pk)
    source.refresh_from_db()
    checked = source.last_checked_at

    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        result = notes.fetch_source(source.pk)

    assert result.status == "unchanged" and result.commit == commit
    assert github.commit_route.calls[1].request.headers["If-None-Match"] == github.etag(commit)
    assert github.commit_route.calls[1].response.status_code == 304
    assert github.tree_route.call_count == 1
    assert len(github.blob_calls) == 3
    source.refresh_from_db()
    assert source.last_checked_at > checked
    assert snapshot_of(source).commit == commit


def test_only_blobs_with_a_new_sha_are_downloaded(github: FakeGitHub, source: NotesSource) -> None:
    github.push(NOTES)
    notes.fetch_source(source.pk)
    changed = {**NOTES, "notes/a.md": "# Lead\nNow on review.\n", "notes/c.md": "# New\n"}
    commit = github.push(changed)

    result = notes.fetch_source(source.pk)

    assert result.status == "stored" and result.downloaded == 2
    assert github.blob_calls[3:] == [git_blob_sha(changed["notes/a.md"]), git_blob_sha("# New\n")]
    snapshot = snapshot_of(source)
    assert snapshot.commit == commit
    assert {f["path"]: f["content"] for f in snapshot.files} == {
        "notes/a.md": "# Lead\nNow on review.\n",
        "notes/c.md": "# New\n",
        "notes/sub/b.md": NOTES["notes/sub/b.md"],  # reused by its SHA
        "PLAN.md": NOTES["PLAN.md"],
    }


def test_a_push_during_the_fetch_cannot_mix_versions(
    github: FakeGitHub, source: NotesSource
) -> None:
    first = github.push(NOTES)
    newer = {**NOTES, "notes/a.md": "# Lead\nPushed mid-fetch.\n"}
    github.on_tree = lambda sha: github.refs["main"] == first and github.push(newer)

    result = notes.fetch_source(source.pk)

    assert github.refs["main"] != first  # the ref moved while the tree was being read
    assert result.status == "stored" and result.commit == first
    assert str(github.tree_route.calls[0].request.url).startswith(
        f"{GITHUB}/repos/{REPOSITORY}/git/trees/{first}"
    )
    first_blobs = {git_blob_sha(c) for c in NOTES.values()}
    assert set(github.blob_calls) <= first_blobs
    snapshot = snapshot_of(source)
    assert snapshot.commit == first
    assert snapshot.files[0]["content"] == NOTES["notes/a.md"]

    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        later = notes.fetch_source(source.pk)
    assert later.status == "stored" and later.commit == github.refs["main"]
    assert snapshot_of(source).files[0]["content"] == "# Lead\nPushed mid-fetch.\n"


def test_a_settings_change_during_the_fetch_stores_nothing(
    github: FakeGitHub, source: NotesSource, lobby: Lobby
) -> None:
    github.push(NOTES)
    github.on_tree = lambda sha: set_notes_source(
        Actor.operator(), lobby.pk, "core", REPOSITORY, "main", ["PLAN.md"]
    )

    result = notes.fetch_source(source.pk)

    assert result.status == "discarded"
    assert not NotesSnapshot.objects.filter(source=source).exists()
    source.refresh_from_db()
    assert source.paths == ["PLAN.md"]
    # The new settings are checked at once, not after the rest of an interval.
    assert notes.is_due(source)


def test_a_failure_under_old_settings_is_not_recorded_against_the_new_ones(
    github: FakeGitHub, source: NotesSource, lobby: Lobby
) -> None:
    github.push(NOTES)
    github.failing_blobs.add(git_blob_sha(NOTES["notes/a.md"]))
    github.on_tree = lambda sha: set_notes_source(
        Actor.operator(), lobby.pk, "core", REPOSITORY, "main", ["PLAN.md"]
    )

    assert notes.fetch_source(source.pk).status == "failed"

    source.refresh_from_db()
    assert (source.paths, source.last_error, source.last_checked_at) == (["PLAN.md"], "", None)
    assert notes.is_due(source)


def test_a_failed_blob_keeps_the_snapshot_and_does_not_advance_the_etag(
    github: FakeGitHub, source: NotesSource
) -> None:
    first = github.push(NOTES)
    notes.fetch_source(source.pk)
    newer = {**NOTES, "notes/d.md": "# Design\n"}
    second = github.push(newer)
    github.failing_blobs.add(git_blob_sha("# Design\n"))

    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        failed = notes.fetch_source(source.pk)

    assert failed.status == "failed" and "502" in failed.problem
    snapshot = snapshot_of(source)
    assert (snapshot.commit, snapshot.etag) == (first, github.etag(first))
    source.refresh_from_db()
    assert source.last_error == failed.problem

    github.failing_blobs.clear()
    with time_machine.travel(timezone.now() + timedelta(minutes=12)):
        retried = notes.fetch_source(source.pk)

    # The old ETag is sent and answered with the new commit, never 304 forever.
    assert github.commit_route.calls[-1].request.headers["If-None-Match"] == github.etag(first)
    assert retried.status == "stored" and retried.commit == second
    snapshot = snapshot_of(source)
    assert (snapshot.commit, snapshot.etag) == (second, github.etag(second))
    source.refresh_from_db()
    assert source.last_error == ""


def test_files_and_sources_are_cut_to_their_share_visibly(
    github: FakeGitHub, source: NotesSource
) -> None:
    big = {
        "notes/1.md": "a" * 50_000,
        "notes/2.md": "b" * 40_000,
        "notes/3.md": "c" * 30_000,
        "notes/4.md": "d" * 10,
    }
    github.push(big)

    notes.fetch_source(source.pk)

    snapshot = snapshot_of(source)
    assert snapshot.truncated
    assert [(f["path"], len(f["content"]), f["truncated"]) for f in snapshot.files] == [
        ("notes/1.md", notes.FILE_CHARS, True),
        ("notes/2.md", 40_000, False),
        ("notes/3.md", notes.SOURCE_CHARS - 80_000, True),
        ("notes/4.md", 0, True),  # past the source's share: listed, never downloaded
    ]
    assert git_blob_sha("d" * 10) not in github.blob_calls
    status = refresh.picture_of(source.room.lobby).sources[0]
    assert status.truncated and status.cut_files == ("notes/1.md", "notes/3.md", "notes/4.md")


def test_without_a_token_nothing_is_requested(
    github: FakeGitHub, source: NotesSource, settings: object
) -> None:
    settings.GITHUB_TOKEN = ""  # type: ignore[attr-defined]
    github.push(NOTES)

    result = notes.fetch_source(source.pk)

    assert result.status == "not_run"
    assert result.problem == "POCOLOBBY_GITHUB_TOKEN is not set: notes cannot be read"
    assert github.commit_route.call_count == 0


def test_a_timeout_keeps_the_last_snapshot(github: FakeGitHub, source: NotesSource) -> None:
    first = github.push(NOTES)
    notes.fetch_source(source.pk)
    github.push({**NOTES, "PLAN.md": "2. more\n"})
    github.commit_route.side_effect = httpx.ConnectTimeout("timed out")

    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        result = notes.fetch_source(source.pk)

    assert result.status == "failed" and result.problem == "GitHub did not answer in time"
    assert snapshot_of(source).commit == first
    source.refresh_from_db()
    assert source.last_error == "GitHub did not answer in time"


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"<html>not json</html>", 200), (b'{"unexpected": true}', 200), (b"{}", 500)],
)
def test_a_malformed_or_failed_answer_is_a_plain_problem(
    github: FakeGitHub, source: NotesSource, body: bytes, status: int
) -> None:
    github.push(NOTES)
    github.commit_route.side_effect = None
    github.commit_route.return_value = httpx.Response(status, content=body)

    result = notes.fetch_source(source.pk)

    assert result.status == "failed"
    assert "GitHub" in result.problem and "Traceback" not in result.problem
    assert not NotesSnapshot.objects.filter(source=source).exists()


def test_a_lobby_deleted_during_the_fetch_stores_nothing(
    github: FakeGitHub, source: NotesSource, lobby: Lobby
) -> None:
    github.push(NOTES)
    github.on_tree = lambda sha: operator.delete_lobby(lobby.name)

    result = notes.fetch_source(source.pk)

    assert result.status == "discarded"
    assert not NotesSnapshot.objects.exists()
    assert not NotesSource.objects.exists()


def test_a_withdrawn_repository_is_not_read(
    github: FakeGitHub, source: NotesSource, lobby: Lobby
) -> None:
    github.push(NOTES)
    withdraw_repository(lobby.name, REPOSITORY)

    result = notes.fetch_source(source.pk)

    assert github.commit_route.call_count == 0
    assert result.status == "failed"
    assert result.problem == f"{REPOSITORY} is no longer approved for this lobby"
    source.refresh_from_db()
    assert source.last_error == result.problem


def test_a_path_that_names_nothing_is_shown_as_missing(
    github: FakeGitHub, source: NotesSource, lobby: Lobby
) -> None:
    set_notes_source(
        Actor.operator(), lobby.pk, "core", REPOSITORY, "main", ["notes", "TODO.md", "PLAN.md"]
    )
    commit = github.push(NOTES)

    notes.fetch_source(source.pk)

    snapshot = snapshot_of(source)
    # "notes" without a slash names the directory; its .md files are read.
    assert [f["path"] for f in snapshot.files] == ["notes/a.md", "notes/sub/b.md", "PLAN.md"]
    status = refresh.picture_of(lobby).sources[0]
    assert status.missing_paths == ("TODO.md",)
    assert status.problem == f"No notes found at TODO.md in commit {commit[:7]}."
    assert status.commit == commit and status.room == "core"


def test_a_source_is_checked_at_most_every_notes_interval(
    github: FakeGitHub, source: NotesSource
) -> None:
    github.push(NOTES)
    assert notes.is_due(source)
    notes.fetch_source(source.pk)
    source.refresh_from_db()

    assert not notes.is_due(source, timezone.now() + timedelta(minutes=4))
    assert notes.is_due(source, timezone.now() + notes.NOTES_INTERVAL)
