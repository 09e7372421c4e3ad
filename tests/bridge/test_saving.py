"""Where a received copy may be saved (pocolobby/bridge/saving.py), over real folders and links
in a fake home directory (tests/bridge/disk.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pocolobby.bridge import files
from pocolobby.bridge.files import FileRefused
from pocolobby.bridge.saving import plan_save, save_file
from tests.bridge.disk import OUTSIDE, PNG, Disk


def test_save_to_writes_a_new_file_and_never_replaces_one(disk: Disk):
    plan = plan_save(str(disk.home / "Downloads"), "shot.png", disk.places)
    assert save_file(plan, PNG, disk.places) == str(disk.home / "Downloads" / "shot.png")
    assert (disk.home / "Downloads" / "shot.png").read_bytes() == PNG
    with pytest.raises(FileRefused) as refused:
        plan_save(str(disk.home / "Downloads"), "shot.png", disk.places)
    assert refused.value.rule == files.RULE_NO_REPLACE
    # A file that appears between the plan and the write is not replaced either.
    late = plan_save(str(disk.home / "Downloads"), "late.png", disk.places)
    (disk.home / "Downloads" / "late.png").write_bytes(b"theirs")
    with pytest.raises(FileRefused) as refused:
        save_file(late, PNG, disk.places)
    assert refused.value.rule == files.RULE_NO_REPLACE
    assert (disk.home / "Downloads" / "late.png").read_bytes() == b"theirs"


@pytest.mark.parametrize(
    "name",
    ["CLAUDE.md", "claude.md", "CLAUDE.local.md", "AGENTS.md", "agents.OVERRIDE.md", "Agents.md"],
)
def test_instruction_files_are_saved_as_attachments(disk: Disk, name: str):
    plan = plan_save(str(disk.scratch), name, disk.places)
    saved = save_file(plan, b"# rules\n", disk.places)
    assert os.path.basename(saved) == f"{name[:-3]} (attachment).md"
    assert not (disk.scratch / name).exists()


def test_an_everyday_markdown_name_keeps_its_name(disk: Disk):
    saved = save_file(
        plan_save(str(disk.scratch), "CLAUDE-notes.md", disk.places), b"x", disk.places
    )
    assert os.path.basename(saved) == "CLAUDE-notes.md"


def test_missing_folders_are_created_after_checking_the_whole_path(disk: Disk):
    target = disk.home / "Dropbox" / "evidence" / "2026-12-01"
    plan = plan_save(str(target), "shot.png", disk.places)
    assert not (disk.home / "Dropbox").exists()  # nothing is created by planning
    assert plan.missing == ("Dropbox", "evidence", "2026-12-01")
    save_file(plan, PNG, disk.places)
    assert (target / "shot.png").read_bytes() == PNG


SAVE_CASES: list[tuple[str, Callable[[Disk], tuple[str, str]], str | None]] = [
    ("relative", lambda d: ("Downloads", "a.png"), files.RULE_ABSOLUTE),
    ("outside home and temp", lambda d: (str(OUTSIDE / "tmp-save"), "a.png"), files.RULE_PLACE),
    ("a dot directory", lambda d: (str(d.home / ".claude" / "new"), "a.png"), files.RULE_DOT),
    ("a dotfile name", lambda d: (str(d.home / "Downloads"), ".bashrc"), files.RULE_DOT),
    (
        "application data",
        lambda d: (str(d.home / "Library" / "Application Support"), "a.png"),
        files.RULE_APP_DATA,
    ),
    (
        "Dropbox in CloudStorage",
        lambda d: (str(d.home / "Library" / "CloudStorage" / "Dropbox" / "new"), "a.png"),
        None,
    ),
    (
        "a credential name",
        lambda d: (str(d.home / "Downloads"), "id_rsa"),
        files.RULE_CREDENTIAL_NAME,
    ),
    (
        "a credential folder",
        lambda d: (str(d.home / "passwords"), "a.png"),
        files.RULE_CREDENTIAL_NAME,
    ),
    ("a plain name", lambda d: (str(d.home / "Downloads"), "key-light.png"), None),
    (
        "a name with a slash",
        lambda d: (str(d.home / "Downloads"), "../a.png"),
        files.RULE_UNCHECKABLE,
    ),
    (
        "a link out of home, then missing folders",
        lambda d: (str(d.link("out", OUTSIDE) / "new" / "deeper"), "a.png"),
        files.RULE_PLACE,
    ),
    (
        "a link into a dot directory, then missing folders",
        lambda d: (str(_link_dir(d, "cfg", ".config") / "new"), "a.png"),
        files.RULE_DOT,
    ),
    (
        "a link to nothing",
        lambda d: (str(d.link("gone", d.home / "nowhere") / "new"), "a.png"),
        files.RULE_UNCHECKABLE,
    ),
    (
        "a file where a folder should be",
        lambda d: (str(d.write("Downloads/file.txt") / "new"), "a.png"),
        files.RULE_UNCHECKABLE,
    ),
    (
        "a linked folder inside home",
        lambda d: (str(_link_dir(d, "Dropbox", "Library/CloudStorage/Dropbox") / "new"), "a.png"),
        None,
    ),
]


def _link_dir(disk: Disk, link: str, target: str) -> Path:
    (disk.home / target).mkdir(parents=True, exist_ok=True)
    return disk.link(link, disk.home / target)


@pytest.mark.parametrize(
    ("make", "rule"), [c[1:] for c in SAVE_CASES], ids=[c[0] for c in SAVE_CASES]
)
def test_save_to_rules(disk: Disk, make: Callable[[Disk], tuple[str, str]], rule: str | None):
    directory, name = make(disk)
    if rule is None:
        saved = save_file(plan_save(directory, name, disk.places), PNG, disk.places)
        assert Path(saved).read_bytes() == PNG
        assert os.path.realpath(saved).startswith(str(disk.home))
    else:
        before = sorted(p for p in disk.home.rglob("*"))
        with pytest.raises(FileRefused) as refused:
            plan_save(directory, name, disk.places)
        assert refused.value.rule == rule, str(refused.value)
        assert sorted(p for p in disk.home.rglob("*")) == before  # nothing created


def test_the_folder_check_before_a_download_does_not_look_for_the_unknown_name(disk: Disk):
    """get_attachment checks save_to before it knows the file name: any existing file in the
    folder must not refuse it then; the real name is checked after the download."""
    disk.write("Downloads/attachment.png", PNG)
    plan_save(str(disk.home / "Downloads"), "attachment.png", disk.places, name_is_known=False)
    with pytest.raises(FileRefused) as refused:
        plan_save(str(disk.home / "Downloads"), "attachment.png", disk.places)
    assert refused.value.rule == files.RULE_NO_REPLACE
    with pytest.raises(FileRefused) as refused:  # every other rule still applies
        plan_save(str(disk.home / ".ssh"), "attachment.png", disk.places, name_is_known=False)
    assert refused.value.rule == files.RULE_DOT
