"""README.md stands on its own in a clone, and `serve` prints what it says (issue 13 §8)."""

from __future__ import annotations

import re
from pathlib import Path

from pocolobby.cli.broker import NEXT_STEPS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_file_readme_names_is_in_the_clone():
    named = set(re.findall(r"`((?:\.\./|docs/|tests/|benchmarks/|\.ci/)[^`\s]*)`", README))
    assert named, "README names no files: the pattern is wrong"
    # A placeholder such as `tests/lobbies/test_<tool>.py` must match at least one file.
    patterns = {re.sub(r"<[^>]+>", "*", name.split("#")[0]) for name in named}
    missing = [name for name in sorted(patterns) if not list(ROOT.glob(name))]
    assert missing == []
    assert "../" not in README


def test_the_next_steps_serve_prints_are_readmes_commands():
    commands = [line.strip() for line in NEXT_STEPS.splitlines() if line.startswith("  ")]
    assert len(commands) == 4
    readme_lines = {line.strip().removeprefix(".venv/bin/") for line in README.splitlines()}
    assert [c for c in commands if c not in readme_lines] == []


def test_contributing_is_linked_and_names_only_files_in_the_clone():
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert "`CONTRIBUTING.md`" in README
    named = set(re.findall(r"`((?:docs/|tests/|benchmarks/|\.ci/)[^`\s]*)`", contributing))
    assert named, "CONTRIBUTING.md names no files: the pattern is wrong"
    assert [name for name in sorted(named) if not list(ROOT.glob(name))] == []


def test_contributing_gives_the_readmes_test_command_as_it_is():
    """CI runs README.md's test command verbatim; CONTRIBUTING.md must not drift from it."""
    command = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest"
    assert command in README.splitlines()
    assert command in (ROOT / "CONTRIBUTING.md").read_text().splitlines()
    assert command in (ROOT / ".ci" / "run").read_text()
