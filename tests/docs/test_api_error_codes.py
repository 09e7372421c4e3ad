"""docs/API.md lists exactly the error codes the code can answer: the members of `ErrorCode`.

Every refusal names its code as an `ErrorCode` member (`BrokerError`, its helpers,
`PageRefusal`, the stream's error frames and closes take nothing else, so mypy checks each call
site); these tests hold the enum, its use and the docs together: every member is documented in
one of API.md's status tables and used somewhere, and every code a table lists is a member.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from lobbies.errors import ERROR_CODES
from lobbies.wire.errors import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("lobbies", "console", "board", "pocolobby")
# A table row whose first cell is an HTTP status, a WebSocket close code or "frame".
STATUS_ROW = re.compile(r"^\|\s*(?:\d{3,4}|frame)\s*\|\s*([^|]+)\|")
MEMBER = re.compile(r"\bErrorCode\.([A-Z_]+)\b")


def _sources() -> list[tuple[Path, str]]:
    found = []
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                found.append((path.relative_to(ROOT), path.read_text()))
    return found


def codes_in_api_md() -> set[str]:
    codes: set[str] = set()
    for line in (ROOT / "docs" / "API.md").read_text().splitlines():
        row = STATUS_ROW.match(line)
        if row:
            codes |= set(re.findall(r"`([a-z_]+)`", row.group(1)))
    return codes


def members_used() -> set[str]:
    """Members named in the code, outside their definition and the status table."""
    used: set[str] = set()
    for relative, text in _sources():
        if relative == Path("lobbies/wire/errors.py"):
            continue
        if relative == Path("lobbies/errors.py"):
            text = text[: text.index("ERROR_CODES: dict")]
        used |= set(MEMBER.findall(text))
    return used


def literal_error_bodies() -> list[str]:
    """`{"code": "...", "message": ...}` bodies written with a plain string for the code."""
    found: list[str] = []
    for relative, text in _sources():
        for node in ast.walk(ast.parse(text, str(relative))):
            if not isinstance(node, ast.Dict):
                continue
            keys = {
                k.value: v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant)
            }
            code = keys.get("code")
            if "message" in keys and isinstance(code, ast.Constant):
                found.append(f"{relative}:{node.lineno}")
    return found


def test_every_error_code_is_in_api_md():
    assert {c.value for c in ErrorCode} - codes_in_api_md() == set()


def test_every_error_code_api_md_lists_is_a_member():
    assert codes_in_api_md() - {c.value for c in ErrorCode} == set()


def test_every_member_is_answered_somewhere():
    assert {c.name for c in ErrorCode} - members_used() == set()


def test_every_status_table_code_is_a_member():
    assert all(isinstance(code, ErrorCode) for codes in ERROR_CODES.values() for code in codes)


def test_an_error_body_names_its_code_by_member():
    assert literal_error_bodies() == []
