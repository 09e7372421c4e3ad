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
