"""docs/PERFORMANCE.md and docs/DECISIONS.md stay readable and their pointers stay true: each
opens with a "How it works now" of about one screen, its links land on headings of the page,
and every section a code comment names for a figure exists (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("PERFORMANCE.md", "DECISIONS.md")
SCREEN = 60  # lines: about one screen, with the tables and lists it holds


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


@pytest.mark.parametrize("name", DOCS)
def test_the_page_opens_with_how_it_works_now_in_one_screen(name: str) -> None:
    lines = (ROOT / "docs" / name).read_text().splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith("## ")]
    assert lines[sections[0]] == "## How it works now"
    assert lines[sections[1]] == "## History", "the passes are kept below, as history"
    assert sections[1] - sections[0] <= SCREEN


@pytest.mark.parametrize("name", DOCS)
def test_every_link_within_the_page_lands_on_a_heading(name: str) -> None:
    text = (ROOT / "docs" / name).read_text()
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(links) > 5, "the summary links its sources"
    assert sorted(set(links) - _anchors(text)) == []


def test_every_section_a_code_comment_names_for_a_figure_exists() -> None:
    headings = set(_headings((ROOT / "docs" / "PERFORMANCE.md").read_text()))
    named: dict[str, list[str]] = {}
    for folder in ("lobbies", "console", "board", "pocolobby"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            # Comments and docstrings wrap: join each line to the next without its indent
            # and its `#`, so a title split over two lines reads whole.
            text = re.sub(r"\n[ \t]*(?:# ?)?", " ", path.read_text())
            for title in re.findall(r'docs/PERFORMANCE\.md, "([^"]+)"', text):
                named.setdefault(title, []).append(str(path.relative_to(ROOT)))
    assert len(named) > 5, "few pointers found: the pattern is wrong"
    assert {title: where for title, where in named.items() if title not in headings} == {}
