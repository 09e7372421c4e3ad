"""Where the bridge may save a received copy (`get_attachment`'s `save_to`): the folder is checked
against the same place rules as a send's files (files.py) before the download, the whole path
again before the write, and an existing file is never replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from pocolobby.bridge.files import (
    RULE_LINK,
    RULE_NO_REPLACE,
    RULE_UNCHECKABLE,
    FileRefused,
    Places,
    check_place,
    normal_absolute,
)

# Claude Code and Codex load these names as instructions; a peer's file must stay a file.
INSTRUCTION_NAMES = frozenset({"claude.md", "claude.local.md", "agents.md", "agents.override.md"})


def save_name(name: str) -> str:
    """The name a received file is saved under: instruction files stay files."""
    if name.casefold() in INSTRUCTION_NAMES:
        return f"{name[:-3]} (attachment).md"
    return name


@dataclass(frozen=True)
class SavePlan:
    """A checked place to save one file: the directory to create (if missing) and the file."""

    directory: str
    file: str
    missing: tuple[str, ...]  # directories to create, outermost first


def plan_save(
    raw_directory: str, name: str, places: Places, *, name_is_known: bool = True
) -> SavePlan:
    """Check `save_to` and the file name before anything is downloaded or created.

    The deepest existing directory above the target is resolved through any links and the
    whole planned path is checked there, so a link cannot lead a new folder out of the home
    or temporary folder or into a dot directory; a dangling link or an uncheckable path is
    refused rather than taken for a missing directory.
    """
    shown = raw_directory if isinstance(raw_directory, str) else repr(raw_directory)
    written = normal_absolute(raw_directory, shown, "save_to directory")
    filename = save_name(name)
    if (
        not filename
        or "/" in filename
        or "\\" in filename
        or "\x00" in filename
        or filename in (".", "..")
    ):
        raise FileRefused(RULE_UNCHECKABLE, shown, f"{name!r} is not a plain file name")
    target = os.path.join(written, filename)
    check_place(target, places, target, what="save_to directory")
    existing, missing = _deepest_existing(written, shown)
    resolved = os.path.realpath(existing)
    planned_dir = os.path.join(resolved, *missing)
    planned = os.path.join(planned_dir, filename)
    if planned != target:
        check_place(planned, places, target, what="folder save_to resolves to")
    if name_is_known and os.path.lexists(planned):
        raise FileRefused(
            RULE_NO_REPLACE, target, "a file of that name exists there; choose another folder"
        )
    return SavePlan(planned_dir, planned, tuple(missing))


def _deepest_existing(written: str, shown: str) -> tuple[str, list[str]]:
    """The deepest existing directory at or above `written` and the names missing below it."""
    missing: list[str] = []
    current = written
    while True:
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            parent = os.path.dirname(current)
            if parent == current:
                raise FileRefused(RULE_UNCHECKABLE, shown, "no existing folder above it") from None
            missing.insert(0, os.path.basename(current))
            current = parent
            continue
        except OSError as exc:
            raise FileRefused(
                RULE_UNCHECKABLE, shown, f"cannot check {current} ({exc.strerror})"
            ) from None
        if stat.S_ISLNK(st.st_mode):
            try:
                st = os.stat(current)
            except OSError:
                raise FileRefused(
                    RULE_UNCHECKABLE,
                    shown,
                    f"{current} is a symbolic link to nothing; it is not taken for a missing "
                    "folder",
                ) from None
        if not stat.S_ISDIR(st.st_mode):
            raise FileRefused(RULE_UNCHECKABLE, shown, f"{current} exists and is not a folder")
        return current, missing


def save_file(plan: SavePlan, data: bytes, places: Places) -> str:
    """Create the missing folders, check the result again, then write without replacing."""
    base = _base(plan)
    for index in range(len(plan.missing)):
        with contextlib.suppress(FileExistsError):  # made meanwhile: judged by the check below
            os.mkdir(os.path.join(base, *plan.missing[: index + 1]), 0o700)
    resolved_dir = os.path.realpath(plan.directory)
    if resolved_dir != plan.directory:
        raise FileRefused(
            RULE_LINK, plan.file, "the folder resolved elsewhere after it was created"
        )
    check_place(plan.file, places, plan.file, what="save_to directory")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(plan.file, flags, 0o600)
    except FileExistsError:
        raise FileRefused(
            RULE_NO_REPLACE, plan.file, "a file of that name exists there; choose another folder"
        ) from None
    except OSError as exc:
        raise FileRefused(
            RULE_UNCHECKABLE, plan.file, f"cannot create it ({exc.strerror})"
        ) from None
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(plan.file)
        raise
    os.close(fd)
    return plan.file


def _base(plan: SavePlan) -> str:
    """The existing folder the plan's missing folders go under."""
    directory = plan.directory
    for _ in plan.missing:
        directory = os.path.dirname(directory)
    return directory
