"""docs/RECIPES.md stays true: every file it names is in the clone, and every tool of the
catalog is on docs/API.md, as its recipe for a tool says (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

from lobbies.api.catalog import TOOLS

ROOT = Path(__file__).resolve().parents[2]
RECIPES = (ROOT / "docs" / "RECIPES.md").read_text()
API = (ROOT / "docs" / "API.md").read_text()
FOLDERS = (
    "lobbies/",
    "console/",
    "board/",
    "pocolobby/",
    "templates/",
    "static/",
    "tests/",
    "docs/",
)


def test_every_file_the_recipes_name_is_in_the_clone() -> None:
    named = {name for name in re.findall(r"`([\w./<>-]+)`", RECIPES) if name.startswith(FOLDERS)}
    assert len(named) > 30, "the recipes name few files: the pattern is wrong"
    bare = re.findall(r"`([\w-]+\.(?:py|html|md))`", RECIPES)
    assert bare == [], "name files by their path from the clone's root"
    # A placeholder such as `tests/lobbies/test_<tool>.py` must match at least one file.
    missing = [p for p in sorted(named) if not list(ROOT.glob(re.sub(r"<[^>]+>", "*", p)))]
    assert missing == []


def test_the_recipes_cover_a_tool_a_card_a_console_page_and_a_lobby_setting() -> None:
    headings = re.findall(r"^## (.+)$", RECIPES, re.M)
    assert headings == [
        "A tool (an agent's operation)",
        "A dashboard card",
        "A console page",
        "A lobby setting",
    ]


def test_every_tool_of_the_catalog_is_on_the_api_page() -> None:
    assert [name for name in sorted(TOOLS) if f"`{name}`" not in API] == []
