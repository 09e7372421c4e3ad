"""docs/PERFORMANCE.md and docs/DECISIONS.md are the current reference, not history (issue 44):
each stays under 400 lines, its section names carry no date or issue number (code comments point
to them), its links land on headings of the page, and every section a comment or another page
names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("PERFORMANCE.md", "DECISIONS.md")
LIMIT = 400  # lines: the current state, not the passes that led to it
# Where pointers live: code, tests, benchmarks, CI and configuration, and the other pages.
POINTING = ("lobbies", "console", "board", "pocolobby", "tests", "benchmarks", "docs")
ONE_FILES = ("pyproject.toml", ".ci/run", "README.md", "CONTRIBUTING.md")


def _headings(text: str) -> list[str]:
    found, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        match = re.match(r"#{1,6} (.+)", line)
        if match and not fence:
            found.append(match.group(1).strip())
    return found


def _anchors(text: str) -> set[str]:
    """Anchors as GitHub makes them: lowercase, punctuation dropped, spaces as hyphens, and
    a repeated heading's anchor numbered."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _headings(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _pointing_files() -> list[Path]:
    files = [ROOT / name for name in ONE_FILES if (ROOT / name).exists()]
    for folder in POINTING:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".md", ".html", ".toml"} and ".venv" not in path.parts:
                files.append(path)
    return files


@pytest.mark.parametrize("name", DOCS)
def test_the_page_is_the_current_state_in_under_400_lines(name: str) -> None:
    lines = (ROOT / "docs" / name).read_text().splitlines()
    assert len(lines) < LIMIT


@pytest.mark.parametrize("name", DOCS)
def test_section_names_are_stable(name: str) -> None:
    headings = _headings((ROOT / "docs" / name).read_text())
    dated = [h for h in headings if re.search(r"\b20\d\d-\d\d|\bissue \d+|\bpass\b", h, re.I)]
    assert dated == [], "a section name carries a date, an issue or a pass"
    assert len(headings) == len(set(headings)), "two sections share a name"


@pytest.mark.parametrize("name", DOCS)
def test_every_link_within_the_page_lands_on_a_heading(name: str) -> None:
    text = (ROOT / "docs" / name).read_text()
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert sorted(set(links) - _anchors(text)) == []


@pytest.mark.parametrize("name", DOCS)
def test_every_section_a_pointer_names_exists(name: str) -> None:
    headings = set(_headings((ROOT / "docs" / name).read_text()))
    named: dict[str, list[str]] = {}
    for path in _pointing_files():
        if path.name == "test_performance_and_decisions.py":
            continue
        # Comments and docstrings wrap: join each line to the next without its indent
        # and its `#`, so a title split over two lines reads whole.
        text = re.sub(r"\n[ \t]*(?:# ?)?", " ", path.read_text())
        for title in re.findall(rf'docs/{re.escape(name)},? "([^"]+)"', text):
            named.setdefault(title, []).append(str(path.relative_to(ROOT)))
    assert len(named) > 3, "few pointers found: the pattern is wrong"
    assert {title: where for title, where in named.items() if title not in headings} == {}
