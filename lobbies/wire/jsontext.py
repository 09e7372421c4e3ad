"""JSON as the broker and the bridge read it: its Python shape, the nesting bound checked before
parsing, and the NUL rule for text."""

from __future__ import annotations

import contextlib
import json
import re
from itertools import accumulate
from typing import Any, TypeAlias

# JSON as Python holds it once parsed, for code that reads free JSON (frames, a checkpoint, a
# request body, a host's status line) and narrows it with isinstance rather than trusting it.
JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]


# How deeply JSON may nest lists and objects where nothing says otherwise: deeper text is
# refused before it is parsed, since everything that walks JSON recursively (the parsers,
# json.dumps, pydantic, the database's JSON functions) fails somewhere near 200 to 1,000
# levels, with a RecursionError or an error that names something else.
MAX_JSON_DEPTH = 64
# The bound for text whose parts are held to MAX_JSON_DEPTH after parsing (a /v1 body's
# arguments, a frame carrying them), so a refusal can name the part; well below the standard
# parser's recursion limit.
PARSE_DEPTH = 512


class JsonTooDeep(ValueError):
    """JSON text nesting deeper than the bound its reader set."""


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Opening brackets become +1, closing ones -1 (as signed bytes).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def json_nesting(text: bytes) -> int:
    """How deeply `text` nests arrays and objects, counted without parsing or recursion (the
    brackets outside strings; text that is not JSON gets a number all the same)."""
    if b'"' in text:
        text = _STRING.sub(b"", text)
    steps = text.translate(None, _NOT_BRACKETS).translate(_STEPS)
    return max(accumulate(memoryview(steps).cast("b")), default=0)


def load_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH, what: str = "the text") -> Any:
    """JSON text parsed, or a ValueError: JsonTooDeep past `max_depth` levels of nesting.

    The one parse of JSON from outside (pages, frames, the bridge's host): bracket counts
    are compared first, so most text costs two counts on top of the parse.
    """
    if _openers(text) > max_depth:
        check_json_nesting(text, max_depth, what)
    try:
        return json.loads(text)
    except RecursionError:  # only when the caller's bound is above the parser's
        raise JsonTooDeep(f"{what} nests JSON too deeply to be read") from None


# NUL (U+0000) is refused wherever text arrives: PostgreSQL's text cannot hold it (a 500
# there), and SQLite would store it; one rule for both stores (docs/API.md, `invalid_text`).
NUL = "\x00"


def may_hold_nul(text: str | bytes) -> bool:
    """Whether JSON text may decode to a NUL: a `\\u0000` escape, or a NUL byte (only inside
    UTF-16 or UTF-32 text, which the parser accepts). Most text is cleared by this search."""
    if isinstance(text, str):
        return "\\u0000" in text or NUL in text
    return b"\\u0000" in text or b"\x00" in text


def nul_at(value: object, where: str = "") -> str | None:
    """Where decoded JSON holds a NUL, in a string or an object's key at any depth, as a path
    (`content`, `fields.note`, `attachments[0].name`, `fields` for a key of it; `` for the
    value itself); None if nowhere."""
    if isinstance(value, str):
        return where if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if NUL in key:
                return where
            found = nul_at(item, f"{where}.{key[:40]}" if where else key[:40])
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = nul_at(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _openers(text: str | bytes) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def check_json_nesting(text: str | bytes, max_depth: int, what: str = "the text") -> None:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if json_nesting(raw) > max_depth:
        raise JsonTooDeep(f"{what} nests JSON deeper than {max_depth} levels")


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]')


def scalar_members(line: bytes) -> JSONObject:
    """The members of a JSON object's top level whose values are not arrays or objects,
    read without parsing the rest (which may nest too deeply to parse)."""
    found: JSONObject = {}
    depth = 0
    key: str | None = None
    value_start: int | None = None

    def record(end: int) -> None:
        if key is None or value_start is None:
            return
        with contextlib.suppress(ValueError):
            found[key] = json.loads(line[value_start:end])

    for match in _TOKEN.finditer(line):
        token = match.group()
        if token in (b"{", b"["):
            if depth == 0 and token == b"[":
                break  # a batch or an array: no members
            if depth == 1:
                value_start = None  # an array or object value: not recorded
            depth += 1
        elif token in (b"}", b"]"):
            if depth == 1:
                record(match.start())
                break
            depth -= 1
        elif depth != 1:
            continue
        elif token == b":":
            value_start = match.end()
        elif token == b",":
            record(match.start())
            key = value_start = None
        elif value_start is None and key is None:
            with contextlib.suppress(ValueError):
                key = json.loads(token)
    return found
