"""The dashboard's model-written half: the last good picture, and the background work.

The page calls `dashboard_opened` on every render or live refresh: it notes the opening in
the store (one upsert, at most every NOTE_EVERY per lobby and process). Every broker's serve
loop (pocolobby/loops.py) takes the due openings (`take_due`, a conditional update, so one
broker starts a lobby's work however many see the opening) and runs `run_refresh` on its own
threads, one at a time per lobby in a process. `picture_of` reads only the store (and what
this process remembers of the summarizer: that the ceiling stopped its last try, an attempt
whose record waits to be stored).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, Q
from django.utils import timezone

from board import notes
from board.models import (
    AttemptOutcome,
    DashboardOpening,
    NotesSnapshot,
    NotesSource,
    SummaryAttempt,
)
from board.summaries import prompt, runs
from lobbies.models import Lobby

log = logging.getLogger(__name__)

# However often the page polls (every 10 s), a lobby's background work starts at most this
# often: nothing it does is due more often than the notes interval anyway.
START_EVERY = timedelta(seconds=30)
# A process writes a lobby's opening at most this often: the page polls every 10 s per viewer.
NOTE_EVERY = timedelta(seconds=10)
# Due: never started, or opened at least START_EVERY after the last start (an opening inside
# that window is dropped, as the page polls every 10 s and will ask again).
_DUE = Q(started_at__isnull=True) | Q(opened_at__gte=F("started_at") + START_EVERY)


@dataclass(frozen=True)
class AgentSummary:
    now: str
    next: str | None  # None: the sources cannot tell, so the page leaves it out


@dataclass(frozen=True)
class SourceStatus:
    room: str
    repository: str
    commit: str  # "" before the first good fetch
    fetched_at: datetime | None
    truncated: bool
    problem: str  # plain words, "" when the last check went well
    cut_files: tuple[str, ...] = ()  # paths cut to their share (or not read at all)
    missing_paths: tuple[str, ...] = ()  # configured paths that named no file at that commit


@dataclass(frozen=True)
class Picture:
    agents: dict[str, AgentSummary] = field(default_factory=dict)  # by agent_id
    summarized_at: datetime | None = None
    # Plain sentences for the page: a failed summary or fetch, a missing secret.
    problems: list[str] = field(default_factory=list)
    sources: list[SourceStatus] = field(default_factory=list)
    # What this lobby's summary attempts cost over the last 24 hours, failures included.
    cost_last_day_usd: Decimal = Decimal(0)


@dataclass(frozen=True)
class RefreshOutcome:
    """What one background run did, for tests and logs."""

    fetches: dict[int, notes.FetchResult] = field(default_factory=dict)  # by source id
    summary: runs.SummaryStatus | None = None


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def last_good_summary(lobby: Lobby) -> SummaryAttempt | None:
    return (
        SummaryAttempt.objects.filter(lobby=lobby, outcome=AttemptOutcome.SUCCEEDED)
        .order_by("-finished_at")
        .first()
    )


def agent_summaries(attempt: SummaryAttempt | None) -> dict[str, AgentSummary]:
    """Now and next by agent id as the summary stored them; callers choose whom to show."""
    if attempt is None or not isinstance(attempt.summary, dict):
        return {}
    entries = attempt.summary.get("agents")
    return {
        agent_id: AgentSummary(
            now=str(entry.get("now", "")),
            next=entry["next"] if isinstance(entry.get("next"), str) else None,
        )
        for agent_id, entry in (entries if isinstance(entries, dict) else {}).items()
        if isinstance(entry, dict)
    }


def picture_of(lobby: Lobby) -> Picture:
    """The last good summary of the agents still shown, the sources and plain problems."""
    problems: list[str] = []
    sources = _sources(lobby, problems)
    if sources and not settings.GITHUB_TOKEN:
        problems.insert(0, notes.MISSING_TOKEN)
    if not settings.ANTHROPIC_API_KEY:
        problems.append(runs.MISSING_KEY)
    last_good = last_good_summary(lobby)
    last = (
        SummaryAttempt.objects.filter(lobby=lobby)
        .exclude(outcome=AttemptOutcome.RESERVED)  # under way, or its broker died
        .order_by("-finished_at")
        .first()
    )
    if last is not None and last.outcome != AttemptOutcome.SUCCEEDED:
        reason = last.error or last.outcome
        shown = (
            f"showing the one from {_when(last_good.finished_at)}."
            if last_good is not None
            else "there is no earlier summary to show."
        )
        problems.append(
            f"The last summary attempt failed ({reason}) at {_when(last.finished_at)}; {shown}"
        )
    cost = runs.cost_since(lobby.pk, timezone.now() - timedelta(hours=24))
    problems.extend(runs.problems(lobby.pk, cost))
    if last_good is None or not isinstance(last_good.summary, dict):
        return Picture(problems=problems, sources=sources, cost_last_day_usd=cost)
    visible = prompt.visible_agent_ids(lobby.pk)
    agents = {k: v for k, v in agent_summaries(last_good).items() if k in visible}
    return Picture(
        agents=agents,
        summarized_at=last_good.finished_at,
        problems=problems,
        sources=sources,
        cost_last_day_usd=cost,
    )


def _sources(lobby: Lobby, problems: list[str]) -> list[SourceStatus]:
    rows = (
        NotesSource.objects.filter(room__lobby=lobby)
        .select_related("room")
        .order_by("room__room_id")
    )
    snapshots = {s.source_id: s for s in NotesSnapshot.objects.filter(source__room__lobby=lobby)}
    statuses = []
    total = 0
    for source in rows:
        snapshot = snapshots.get(source.pk)
        files = snapshot.files if snapshot and isinstance(snapshot.files, list) else []
        files = [f for f in files if isinstance(f, dict)]
        total += sum(len(str(f.get("content", ""))) for f in files)
        paths = [str(p) for p in source.paths] if isinstance(source.paths, list) else []
        missing = (
            notes.unmatched_paths(paths, [str(f.get("path", "")) for f in files])
            if snapshot
            else []
        )
        problem = source.last_error
        if not problem and missing and snapshot is not None:
            named = ", ".join(missing)
            problem = f"No notes found at {named} in commit {snapshot.commit[:7]}."
        statuses.append(
            SourceStatus(
                room=source.live_room.room_id,
                repository=source.repository,
                commit=snapshot.commit if snapshot else "",
                fetched_at=snapshot.fetched_at if snapshot else None,
                truncated=bool(snapshot.truncated) if snapshot else False,
                problem=problem,
                cut_files=tuple(str(f.get("path", "")) for f in files if f.get("truncated")),
                missing_paths=tuple(missing),
            )
        )
    if total > notes.LOBBY_CHARS:
        problems.append(
            f"The notes are longer than a summary reads ({notes.LOBBY_CHARS:,} characters); "
            "the rest is left out of it."
        )
    return statuses


# --- Background work: asked for by the page, run by the serve loops ----------------------
# The page notes in the store that a lobby's dashboard was opened; every broker's serve loop
# (pocolobby/loops.py, `run_dashboard_work`) takes the due openings and runs the work on its
# own threads. Nothing here starts a thread.

_lock = threading.Lock()
_noted: dict[int, datetime] = {}  # when this process last wrote each lobby's opening
_running: set[int] = set()  # lobbies whose work runs in this process now


def forget() -> None:
    """Drop what this process remembers (for tests)."""
    with _lock:
        _noted.clear()
        _running.clear()
    runs.forget()


def dashboard_opened(lobby_id: int) -> None:
    """Note in the store that the lobby's dashboard was opened: one upsert, at most every
    NOTE_EVERY per lobby in this process; never raises (a refused write is only logged)."""
    now = timezone.now()
    with _lock:
        last = _noted.get(lobby_id)
        if last is not None and timedelta(0) <= now - last < NOTE_EVERY:
            return
        _noted[lobby_id] = now
    try:
        with transaction.atomic():
            DashboardOpening.objects.bulk_create(
                [DashboardOpening(lobby_id=lobby_id, opened_at=now)],
                update_conflicts=True,
                unique_fields=["lobby"],
                update_fields=["opened_at"],
            )
    except DatabaseError:
        log.warning("the opening of lobby %s's dashboard could not be noted", lobby_id)
        with _lock:
            _noted.pop(lobby_id, None)


def take_due(now: datetime) -> list[int]:
    """The lobbies whose work starts now in this process, marked running: opened on any
    broker since their last start, not running here, not started within START_EVERY.

    A read finds them (an idle store is not written), then a conditional update per lobby
    claims its start: of the brokers that saw it due, one updates the row."""
    found = list(DashboardOpening.objects.filter(_DUE).values_list("lobby_id", flat=True))
    with _lock:
        candidates = sorted(set(found) - _running)
    due = []
    for lobby_id in candidates:
        if DashboardOpening.objects.filter(_DUE, pk=lobby_id).update(started_at=now):
            with _lock:
                _running.add(lobby_id)
            due.append(lobby_id)
    return due


def finished(lobby_id: int) -> None:
    """The lobby's run ended (or never started): its next opening may start another."""
    with _lock:
        _running.discard(lobby_id)


def run_refresh(lobby_id: int) -> RefreshOutcome:
    """Check the lobby's due notes sources, then summarize if the rules say so. Never raises."""
    fetches: dict[int, notes.FetchResult] = {}
    try:
        lobby = Lobby.objects.filter(pk=lobby_id).first()
        if lobby is None:
            runs.forget(lobby_id)
            return RefreshOutcome()
        now = timezone.now()
        for source in NotesSource.objects.filter(room__lobby_id=lobby_id).order_by("pk"):
            if notes.is_due(source, now):
                fetches[source.pk] = notes.fetch_source(source.pk)
        if any(result.status == "stored" for result in fetches.values()):
            runs.notes_changed(lobby_id)
        return RefreshOutcome(fetches=fetches, summary=runs.maybe_summarize(lobby))
    except Exception:
        log.exception("the dashboard's background work failed for lobby %s", lobby_id)
        return RefreshOutcome(fetches=fetches)
