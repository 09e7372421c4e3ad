"""Savepoints on the embedded store (lobbies/fastlane/sqlite/base.py): named by depth, merged into
the enclosing one while `merging_savepoints` when nothing was written in between, and none
at all in an `optimistic_commit`, which a failed block abandons."""

from __future__ import annotations

import re

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lobbies.fastlane.sqlite.base import (
    SharedCommitAbandoned,
    merging_savepoints,
    optimistic_commit,
)
from lobbies.models import Lobby

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'sqlite'", reason="the embedded store's backend"),
]


class Refused(Exception):
    pass


def _lobby(name: str) -> None:
    Lobby.objects.create(name=name, created_at=timezone.now())


def _lobbies() -> list[str]:
    return sorted(Lobby.objects.values_list("name", flat=True))


def _savepoint_sql(captured: CaptureQueriesContext) -> list[str]:
    """The savepoint statements run, as `SAVEPOINT p1`, `RELEASE p1`, `ROLLBACK TO p1`."""
    found = []
    for query in captured.captured_queries:
        match = re.match(
            r'(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT) "?(\w+)"?', query["sql"]
        )
        if match:
            found.append(f"{match.group(1).replace(' SAVEPOINT', '')} {match.group(2)}")
    return found


def _refused(name: str) -> None:
    """A part of a request that writes, then fails in its own atomic block."""
    with transaction.atomic():
        _lobby(name)
        raise Refused


def test_a_savepoint_opened_with_nothing_written_since_the_enclosing_one_runs_no_sql():
    # The shared commit, a request's savepoint, and its send's own savepoint at once.
    with (
        CaptureQueriesContext(connection) as captured,
        transaction.atomic(),
        merging_savepoints(DEFAULT_DB_ALIAS),
        transaction.atomic(),
        transaction.atomic(),
    ):
        _lobby("a")
    assert _savepoint_sql(captured) == ["SAVEPOINT p1", "RELEASE p1"]
    assert _lobbies() == ["a"]


def test_rolling_back_a_merged_savepoint_undoes_only_what_was_written_inside_it():
    with transaction.atomic(), merging_savepoints(DEFAULT_DB_ALIAS):
        _lobby("before")
        with transaction.atomic():
            with pytest.raises(Refused):
                _refused("refused")
            # The request goes on after its refused part, as a send looks up its original.
            _lobby("after")
    assert _lobbies() == ["after", "before"]


def test_after_a_write_a_nested_savepoint_is_its_own():
    with (
        CaptureQueriesContext(connection) as captured,
        transaction.atomic(),
        merging_savepoints(DEFAULT_DB_ALIAS),
        transaction.atomic(),
    ):
        _lobby("kept")
        with pytest.raises(Refused):
            _refused("refused")
    assert _savepoint_sql(captured) == [
        "SAVEPOINT p1",
        "SAVEPOINT p2",
        "ROLLBACK TO p2",
        "RELEASE p2",
        "RELEASE p1",
    ]
    assert _lobbies() == ["kept"]


def _request_that_fails_after_its_send() -> None:
    with transaction.atomic():
        with transaction.atomic():
            _lobby("second")
        raise Refused


def test_a_refused_request_with_a_merged_savepoint_leaves_the_others_of_the_commit():
    with transaction.atomic(), merging_savepoints(DEFAULT_DB_ALIAS):
        with transaction.atomic():
            _lobby("first")
        with pytest.raises(Refused):
            _request_that_fails_after_its_send()
        with transaction.atomic():
            _lobby("third")
    assert _lobbies() == ["first", "third"]


def test_without_merging_every_savepoint_is_its_own_and_names_are_by_depth():
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        for name in ("a", "b"):
            with transaction.atomic(), transaction.atomic():
                _lobby(name)
    # The same two names each time: the driver keeps the statements prepared.
    assert (
        _savepoint_sql(captured)
        == [
            "SAVEPOINT p1",
            "SAVEPOINT p2",
            "RELEASE p2",
            "RELEASE p1",
        ]
        * 2
    )
    assert _lobbies() == ["a", "b"]


def _transaction_that_fails() -> None:
    with transaction.atomic():
        _refused("lost")


def test_a_new_transaction_starts_with_no_savepoints_left_from_a_failed_one():
    with pytest.raises(Refused):
        _transaction_that_fails()
    with CaptureQueriesContext(connection) as captured, transaction.atomic(), transaction.atomic():
        _lobby("kept")
    assert _savepoint_sql(captured) == ["SAVEPOINT p1", "RELEASE p1"]
    assert _lobbies() == ["kept"]


def _answer_errors_as_a_view_does() -> str:
    """A request's part that writes and fails in its own atomic block, inside a handler that
    turns any error into an answer (lobbies.api.http.api_view's `except Exception`)."""
    try:
        _refused("refused")
    except Exception:
        return "answered 500"
    return "answered 200"


def test_an_optimistic_commit_opens_no_savepoints():
    with (
        CaptureQueriesContext(connection) as captured,
        transaction.atomic(),
        optimistic_commit(DEFAULT_DB_ALIAS),
    ):
        for name in ("a", "b"):
            with transaction.atomic(), transaction.atomic():
                _lobby(name)
    assert _savepoint_sql(captured) == []
    assert _lobbies() == ["a", "b"]


def _optimistic_commit_with_a_failing_request() -> None:
    with transaction.atomic():
        _lobby("before")
        with optimistic_commit(DEFAULT_DB_ALIAS):
            _answer_errors_as_a_view_does()


def test_a_failed_block_abandons_an_optimistic_commit_past_the_requests_own_handlers():
    with pytest.raises(SharedCommitAbandoned):
        _optimistic_commit_with_a_failing_request()
    assert _lobbies() == []  # the whole transaction was rolled back
    # Savepoints are back once the optimistic commit is over.
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        assert _answer_errors_as_a_view_does() == "answered 500"
        _lobby("kept")
    assert _savepoint_sql(captured) == ["SAVEPOINT p1", "ROLLBACK TO p1", "RELEASE p1"]
    assert _lobbies() == ["kept"]
