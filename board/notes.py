"""Notes at one commit per source: the dashboard's read-only view of a room's notes in GitHub.

A fetch resolves the source's ref to one commit with a conditional request, lists the tree at
that commit and downloads only blobs whose SHA the last snapshot does not hold, so a push
during a fetch cannot mix versions. All network work happens outside any transaction; one
short transaction then replaces the snapshot, and only if the source's settings are still the
ones the fetch started with. The ETag advances only with the snapshot it describes, so a fetch
that failed after a new commit is retried instead of being answered 304 forever. A failure
keeps the last snapshot and records a plain `last_error`; nothing here raises into the page.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, ValidationError

from board.models import NotesSnapshot, NotesSource
from console.actions.accounts import REPOSITORY
from console.models import ApprovedRepository

log = logging.getLogger(__name__)

# A source is checked at most this often, however often the dashboard is opened.
NOTES_INTERVAL = timedelta(minutes=5)
# Fixed shares, so one room's notes cannot crowd out the others. Cuts are marked on the files
# (`truncated`) and on the snapshot, and the page says so.
FILE_CHARS = 40_000
SOURCE_CHARS = 100_000
# The summarizer's cap over all of a lobby's sources (board/summaries/prompt.py applies it).
LOBBY_CHARS = 200_000
# Files a single source may list; more are cut visibly rather than downloaded one by one.
SOURCE_FILES = 100
# A blob larger than this is not downloaded at all (its share could not hold it anyway).
BLOB_BYTES = 1_000_000
GITHUB_TIMEOUT = httpx.Timeout(20.0, connect=10.0)
NOTES_SUFFIX = ".md"

MISSING_TOKEN = "POCOLOBBY_GITHUB_TOKEN is not set: notes cannot be read"  # noqa: S105

FetchStatus = Literal["stored", "unchanged", "discarded", "failed", "not_run"]


@dataclass(frozen=True)
class FetchResult:
    """What one fetch did; `problem` is a plain sentence for the page, "" when all went well."""

    status: FetchStatus
    commit: str = ""
    problem: str = ""
    downloaded: int = 0  # blobs fetched over the network (the rest were reused by SHA)


class FetchFailure(Exception):
    """A fetch that cannot go on; its message is the plain `last_error`."""


@dataclass(frozen=True)
class _Start:
    """What the fetch read in its one short read, before any network work."""

    source_id: int
    lobby_id: int
    repository: str
    ref: str
    paths: list[str]
    settings_version: int
    commit: str
    etag: str
    files_by_sha: dict[str, dict[str, Any]]


class _Commit(BaseModel):
    model_config = ConfigDict(extra="ignore")
    sha: str


class _TreeEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str
    type: str
    sha: str
    size: int | None = None


class _Tree(BaseModel):
    model_config = ConfigDict(extra="ignore")
    sha: str
    tree: list[_TreeEntry]
    truncated: bool = False


class _Blob(BaseModel):
    model_config = ConfigDict(extra="ignore")
    sha: str
    content: str
    encoding: Literal["base64"]


def is_due(source: NotesSource, now: datetime | None = None) -> bool:
    """A source never checked (a settings change clears the check time) or not checked for
    a notes interval is due."""
    now = now or timezone.now()
    return source.last_checked_at is None or source.last_checked_at <= now - NOTES_INTERVAL


def fetch_source(source_id: int) -> FetchResult:
    """Check one source and store its notes at one commit; never raises into the page."""
    if not settings.GITHUB_TOKEN:
        return FetchResult("not_run", problem=MISSING_TOKEN)
    try:
        start = _read_start(source_id)
    except DatabaseError:
        log.exception("notes source %s could not be read", source_id)
        return FetchResult("failed", problem="The notes source could not be read from the store.")
    if start is None:
        return FetchResult("discarded", problem="The notes source no longer exists.")
    if not REPOSITORY.match(start.repository):
        return _record_failure(start, f"{start.repository!r} is not a GitHub owner/name")
    if not ApprovedRepository.objects.filter(
        lobby_id=start.lobby_id, repository=start.repository
    ).exists():
        return _record_failure(start, f"{start.repository} is no longer approved for this lobby")
    try:
        with _github() as client:
            return _fetch(client, start)
    except FetchFailure as failure:
        return _record_failure(start, str(failure))
    except httpx.TimeoutException:
        return _record_failure(start, "GitHub did not answer in time")
    except httpx.HTTPError as error:
        return _record_failure(start, f"GitHub could not be reached ({type(error).__name__})")


def _github() -> httpx.Client:
    return httpx.Client(
        base_url=settings.GITHUB_API_URL.rstrip("/"),
        headers={
            "Authorization": f"Bearer {settings.GITHUB_TOKEN}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "PocoLobby-dashboard",
        },
        timeout=GITHUB_TIMEOUT,
        follow_redirects=False,
    )


def _read_start(source_id: int) -> _Start | None:
    source = (
        NotesSource.objects.select_related("room").filter(pk=source_id, room__isnull=False).first()
    )
    if source is None:
        return None
    snapshot = NotesSnapshot.objects.filter(source_id=source_id).first()
    files_by_sha: dict[str, dict[str, Any]] = {}
    if snapshot is not None:
        for entry in snapshot.files if isinstance(snapshot.files, list) else []:
            # A cut file is read again: the share it gets this time may differ.
            if isinstance(entry, dict) and entry.get("sha") and not entry.get("truncated"):
                files_by_sha[str(entry["sha"])] = entry
    return _Start(
        source_id=source.pk,
        lobby_id=source.live_room.lobby_id,
        repository=source.repository,
        ref=source.ref or "main",
        paths=[str(p) for p in source.paths] if isinstance(source.paths, list) else [],
        settings_version=source.settings_version,
        commit=snapshot.commit if snapshot else "",
        etag=snapshot.etag if snapshot else "",
        files_by_sha=files_by_sha,
    )


def _get_json(client: httpx.Client, url: str, what: str, **kwargs: Any) -> httpx.Response:
    response = client.get(url, **kwargs)
    if response.status_code == 304:
        return response
    if response.status_code == 404:
        raise FetchFailure(f"GitHub has no {what} (404): check the repository, ref and token")
    if response.status_code in (401, 403):
        raise FetchFailure(
            f"GitHub refused to show the {what} ({response.status_code}): "
            "the token lacks access or hit its rate limit"
        )
    if response.status_code != 200:
        raise FetchFailure(f"GitHub answered {response.status_code} for the {what}")
    return response


def _parse(model: type[BaseModel], response: httpx.Response, what: str) -> Any:
    try:
        return model.model_validate_json(response.content)
    except ValidationError:
        raise FetchFailure(f"GitHub's answer for the {what} was not what it should be") from None


def _fetch(client: httpx.Client, start: _Start) -> FetchResult:
    repo = start.repository
    headers = {"If-None-Match": start.etag} if start.etag and start.commit else {}
    response = _get_json(
        client, f"/repos/{repo}/commits/{quote(start.ref, safe='/')}", "commit", headers=headers
    )
    if response.status_code == 304:
        _record_unchanged(start)
        return FetchResult("unchanged", commit=start.commit)
    commit = _parse(_Commit, response, "commit").sha
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise FetchFailure("GitHub's answer for the commit was not what it should be")
    etag = response.headers.get("ETag", "")[:200]
    # Everything below is read at this one commit, whatever the ref does meanwhile.
    tree = _parse(
        _Tree,
        _get_json(client, f"/repos/{repo}/git/trees/{commit}", "tree", params={"recursive": "1"}),
        "tree",
    )
    wanted, cut = _select(start.paths, tree)
    files: list[dict[str, Any]] = []
    budget = SOURCE_CHARS
    downloaded = 0
    for entry in wanted:
        if budget <= 0 or (entry.size or 0) > BLOB_BYTES:
            files.append({"path": entry.path, "sha": entry.sha, "content": "", "truncated": True})
            cut = True
            continue
        known = start.files_by_sha.get(entry.sha)
        if known is not None:
            text = str(known.get("content", ""))
        else:
            text = _download(client, repo, entry.sha)
            downloaded += 1
        share = min(FILE_CHARS, budget)
        truncated = len(text) > share
        text = text[:share]
        budget -= len(text)
        cut = cut or truncated
        files.append(
            {"path": entry.path, "sha": entry.sha, "content": text, "truncated": truncated}
        )
    stored = _store(start, commit=commit, etag=etag, files=files, truncated=cut)
    if not stored:
        return FetchResult("discarded", commit=commit, downloaded=downloaded)
    return FetchResult("stored", commit=commit, downloaded=downloaded)


def _select(paths: list[str], tree: _Tree) -> tuple[list[_TreeEntry], bool]:
    """The blobs the paths name, in path order: a file by its path, a directory's .md files."""
    blobs = [e for e in tree.tree if e.type == "blob"]
    directories = {e.path for e in tree.tree if e.type == "tree"}
    chosen: dict[str, _TreeEntry] = {}
    for raw in paths:
        path = raw.strip().strip("/")
        if not path:
            continue
        if not raw.endswith("/") and path not in directories:
            exact = [e for e in blobs if e.path == path]
            for entry in exact:
                chosen.setdefault(entry.path, entry)
            continue
        prefix = f"{path}/"
        for entry in sorted(blobs, key=lambda e: e.path):
            if entry.path.startswith(prefix) and entry.path.endswith(NOTES_SUFFIX):
                chosen.setdefault(entry.path, entry)
    entries = list(chosen.values())
    # A tree GitHub cut, or more files than a source may hold, is marked as cut.
    cut = tree.truncated or len(entries) > SOURCE_FILES
    return entries[:SOURCE_FILES], cut


def unmatched_paths(paths: list[str], file_paths: list[str]) -> list[str]:
    """The configured paths that named no file in a snapshot (for the page's plain problem)."""
    missing = []
    for raw in paths:
        path = str(raw).strip().strip("/")
        if not path:
            continue
        prefix = f"{path}/"
        if not any(p == path or p.startswith(prefix) for p in file_paths):
            missing.append(path)
    return missing


def _download(client: httpx.Client, repo: str, sha: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise FetchFailure("GitHub's tree named a blob that is not a SHA")
    blob = _parse(_Blob, _get_json(client, f"/repos/{repo}/git/blobs/{sha}", "blob"), "blob")
    try:
        raw = base64.b64decode(blob.content)
    except (binascii.Error, ValueError):
        raise FetchFailure("GitHub's answer for a blob was not base64") from None
    return raw.decode("utf-8", errors="replace")


def _store(
    start: _Start, *, commit: str, etag: str, files: list[dict[str, Any]], truncated: bool
) -> bool:
    """One short transaction: the snapshot and its ETag, only under unchanged settings."""
    now = timezone.now()
    try:
        with transaction.atomic():
            source = NotesSource.objects.select_for_update().filter(pk=start.source_id).first()
            if source is None or source.settings_version != start.settings_version:
                return False
            NotesSnapshot.objects.update_or_create(
                source=source,
                defaults={
                    "commit": commit,
                    "etag": etag,
                    "files": files,
                    "truncated": truncated,
                    "fetched_at": now,
                },
            )
            source.last_checked_at = now
            source.last_error = ""
            source.save(update_fields=["last_checked_at", "last_error"])
    except DatabaseError:
        log.exception("notes snapshot of source %s could not be stored", start.source_id)
        return False
    return True


def _record_unchanged(start: _Start) -> None:
    """The ref still names the snapshot's commit: only the check time (and a clear error)."""
    try:
        NotesSource.objects.filter(
            pk=start.source_id, settings_version=start.settings_version
        ).update(last_checked_at=timezone.now(), last_error="")
    except DatabaseError:
        log.exception("notes source %s check could not be recorded", start.source_id)


def _record_failure(start: _Start, problem: str) -> FetchResult:
    """Keep the last snapshot and its ETag; record what went wrong in plain words."""
    problem = problem[:300]
    try:
        # Only against the settings it ran under: a newer source stays due and clean.
        NotesSource.objects.filter(
            pk=start.source_id, settings_version=start.settings_version
        ).update(last_checked_at=timezone.now(), last_error=problem)
    except DatabaseError:
        log.exception("notes source %s failure could not be recorded", start.source_id)
    return FetchResult("failed", problem=problem)
