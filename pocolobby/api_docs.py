"""docs/API.md's tables, rendered from the OpenAPI document so they cannot drift from the code.

docs/API.md is prose written by hand around tables this module writes. A table sits between
marker comments naming what it shows:

    <!-- generated: arguments send_message -->
    ...
    <!-- end generated -->

The kinds (`SECTIONS`): `arguments OP` and `answer OP` (an operation's arguments and its
success answer), `schema NAME` (one shape of the document's components, for an object an
argument or answer nests) and `operations PREFIX` (one row per operation under a path, such
as the operator's /v1/admin, or per tool of a list: `operations list_rooms create_room`).
OP is a tool's name (its `POST /v1/tools/<name>` operation) or `METHOD /path` as the
document spells the path. Everything a table says comes from the document `lobbies.api.openapi`
generates from the pydantic models and TypedDicts: to change a
table, change the model (a `Field` description, a bound) and run

    .venv/bin/python -m pocolobby.api_docs --write

tests/docs/test_api_tables.py fails, naming the section, while docs/API.md differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lobbies.names import NAME_PATTERN

API_MD = Path(__file__).resolve().parent.parent / "docs" / "API.md"
WRITE_COMMAND = ".venv/bin/python -m pocolobby.api_docs --write"
API_URLS = "pocolobby.urls_api"

# A JSON Schema or OpenAPI object as json.loads reads it.
Node = dict[str, Any]

BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<kind>[a-z]+) (?P<subject>[^>]+?) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- end generated -->)",
    re.DOTALL,
)


class UnknownSection(Exception):
    """A marker names a kind or a subject the document does not have."""


@dataclass(frozen=True)
class Section:
    """One generated block of docs/API.md: what its marker names and what it holds now."""

    kind: str
    subject: str
    body: str

    @property
    def name(self) -> str:
        return f"{self.kind} {self.subject}"


# ------------------------------------------------------------------ reading the document


def _schemas(document: Node) -> Node:
    schemas: Node = document["components"]["schemas"]
    return schemas


def _resolve(document: Node, node: Node) -> Node:
    ref = node.get("$ref")
    if ref is None:
        return node
    name = ref.rsplit("/", 1)[-1]
    resolved: Node = _schemas(document)[name]
    return resolved


def _operation(document: Node, subject: str) -> tuple[str, str, Node]:
    """(method, path, operation) for a tool's name or `METHOD /path`."""
    method, _, path = subject.partition(" ")
    if not path:
        method, path = "POST", f"/v1/tools/{subject}"
    operation = document["paths"].get(path, {}).get(method.lower())
    if operation is None:
        raise UnknownSection(f"the OpenAPI document has no operation {method} {path}")
    return method, path, operation


def _body_schema(document: Node, operation: Node) -> Node | None:
    content = operation.get("requestBody", {}).get("content", {})
    if "application/json" not in content:
        return None
    return _resolve(document, content["application/json"]["schema"])


def _answer_schema(document: Node, operation: Node) -> tuple[str, Node] | None:
    """(status, schema) of the first success answer that is JSON."""
    for status, response in operation["responses"].items():
        json_answer = response.get("content", {}).get("application/json")
        if status.startswith("2") and json_answer is not None:
            return status, _resolve(document, json_answer["schema"])
    return None


# ------------------------------------------------------------------ words for a schema


def _number(value: object) -> str:
    if isinstance(value, int) and value >= 2**20 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return str(value)


def _code(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`"


def _default(value: object) -> str:
    """A default as the JSON a caller would send: `"info"`, `""`, `false`, `null`."""
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _span(low: object, high: object, unit: str) -> str:
    if low not in (None, 0) and high is not None:
        return f" ({_number(low)}-{_number(high)} {unit})"
    if high is not None:
        return f" (up to {_number(high)} {unit})"
    if low not in (None, 0):
        return f" (at least {_number(low)} {unit[:-1] if low == 1 else unit})"
    return ""


def _type(document: Node, node: Node) -> str:
    """A schema in a few words: its type, choices and bounds."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = _resolve(document, node)
        if "enum" in target:
            return _type(document, target)
        return name
    choices = node.get("anyOf") or node.get("oneOf")
    if choices:
        words = [_type(document, c) for c in choices if c != {"type": "null"}]
        nullable = len(words) < len(choices)
        return " or ".join(words) + (" or null" if nullable else "")
    if "const" in node:
        return _code(node["const"])
    if "enum" in node:
        return " \\| ".join(_code(value) for value in node["enum"])
    kind = node.get("type")
    if kind == "array":
        items = _type(document, node.get("items", {})) or "anything"
        count = _span(node.get("minItems"), node.get("maxItems"), "items")
        return f"array of {items}{count}"
    if kind == "string":
        if node.get("format") == "date-time":
            return "time (ISO 8601)"
        if node.get("format") == "binary":
            return "bytes"
        length = _span(node.get("minLength"), node.get("maxLength"), "characters")
        if node.get("pattern") == NAME_PATTERN:
            return "string (name rule)"
        pattern = f" matching `{node['pattern']}`" if "pattern" in node else ""
        return f"string{length}{pattern}"
    if kind == "integer" or kind == "number":
        low, high = node.get("minimum"), node.get("maximum")
        word = "integer" if kind == "integer" else "number"
        if low is not None and high is not None:
            return f"{word} ({_number(low)} to {_number(high)})"
        if low is not None:
            return f"{word} ≥ {_number(low)}"
        if high is not None:
            return f"{word} ≤ {_number(high)}"
        return word
    if kind == "object":
        return "object"
    if kind in ("boolean", "null"):
        return str(kind)
    return "anything"


def _cell(text: str) -> str:
    """Table cell text: one line, pipes escaped (a code span's too, as GitHub reads tables)."""
    text = " ".join(text.split())
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def _description(node: Node) -> str:
    text = node.get("description", "")
    if not text and "$ref" not in node:
        for choice in node.get("anyOf", []):
            text = choice.get("description", "")
            if text:
                break
    return str(text)


def _table(header: tuple[str, ...], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; a last column with nothing in it (no descriptions yet) is left out."""
    if header[-1] == "description" and not any(row[-1] for row in rows):
        header, rows = header[:-1], [tuple(row)[:-1] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _argument_rows(document: Node, schema: Node) -> list[tuple[str, ...]]:
    required = set(schema.get("required", []))
    rows: list[tuple[str, ...]] = []
    for name, node in schema.get("properties", {}).items():
        default = _default(node["default"]) if "default" in node else ""
        rows.append(
            (
                f"`{name}`",
                _type(document, node),
                "required" if name in required else "",
                "" if name in required else default,
                _description(node),
            )
        )
    return rows


ARGUMENT_HEADER = ("argument", "type", "required", "default", "description")
ANSWER_HEADER = ("key", "type", "present", "description")
NO_ARGUMENTS = "It takes no arguments.\n"


# ------------------------------------------------------------------ the kinds of table


def _parameter_row(document: Node, parameter: Node) -> tuple[str, ...]:
    """A query parameter's row: its schema never holds a null default (lobbies/api/openapi.py)."""
    spec = parameter["schema"]
    return (
        f"`{parameter['name']}`",
        _type(document, spec),
        "required" if parameter["required"] else "",
        _default(spec["default"]) if "default" in spec else "",
        parameter.get("description", ""),
    )


def arguments(document: Node, subject: str) -> str:
    """An operation's arguments: its JSON body's properties, or its query parameters."""
    _method, _path, operation = _operation(document, subject)
    schema = _body_schema(document, operation)
    if schema is not None:
        rows = _argument_rows(document, schema)
    else:
        rows = [
            _parameter_row(document, parameter)
            for parameter in operation.get("parameters", [])
            if parameter["in"] == "query"
        ]
    return _table(ARGUMENT_HEADER, rows) if rows else NO_ARGUMENTS


def _answer_rows(document: Node, schema: Node) -> list[tuple[str, ...]]:
    required = set(schema.get("required", []))
    return [
        (
            f"`{name}`",
            _type(document, node),
            "always" if name in required else "when it applies",
            _description(node),
        )
        for name, node in schema.get("properties", {}).items()
    ]


def answer(document: Node, subject: str) -> str:
    """An operation's success answer, key by key (`present`: always, or only when it applies)."""
    _method, _path, operation = _operation(document, subject)
    found = _answer_schema(document, operation)
    if found is None:
        raise UnknownSection(f"{subject} has no JSON answer in the OpenAPI document")
    status, schema = found
    title = schema.get("title", "")
    lead = f"Answer `{status}`" + (f" ({title})" if title else "") + ":\n\n"
    return lead + _table(ANSWER_HEADER, _answer_rows(document, schema))


def schema(document: Node, subject: str) -> str:
    """One component of the document: an argument's properties, or an answer's keys."""
    node = _schemas(document).get(subject)
    if node is None:
        raise UnknownSection(f"the OpenAPI document has no schema {subject}")
    if "properties" not in node:
        return f"{_type(document, node)}\n"
    if node["title"] in {s.get("title") for s in _request_schemas(document)}:
        return _table(ARGUMENT_HEADER, _argument_rows(document, node))
    return _table(ANSWER_HEADER, _answer_rows(document, node))


def _request_schemas(document: Node) -> Iterator[Node]:
    """The schemas a request body or a component of one is (validated, not answered)."""
    seen: set[str] = set()
    pending: list[Node] = []
    for item in document["paths"].values():
        for operation in item.values():
            body = _body_schema(document, operation)
            if body is not None:
                pending.append(body)
    while pending:
        node = pending.pop()
        title = node.get("title", "")
        if title in seen:
            continue
        seen.add(title)
        yield node
        for ref in re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(node)):
            pending.append(_schemas(document)[ref])


def _names(names: list[str], required: set[str]) -> str:
    return ", ".join(f"`{name}`" if name in required else f"`{name}`?" for name in names)


def _argument_names(document: Node, operation: Node) -> str:
    body = _body_schema(document, operation)
    if body is not None:
        return _names(list(body.get("properties", {})), set(body.get("required", [])))
    query = [p for p in operation.get("parameters", []) if p["in"] == "query"]
    return _names([p["name"] for p in query], {p["name"] for p in query if p["required"]})


def _operations_in(document: Node, subject: str) -> Iterator[tuple[str, str, Node]]:
    """The operations under a path prefix (`/v1/admin`), or the tools named (`a b c`)."""
    if subject.startswith("/"):
        for path, item in document["paths"].items():
            if path.startswith(subject):
                for method, operation in item.items():
                    yield method.upper(), path, operation
    else:
        for name in subject.split():
            yield _operation(document, name)


def operations(document: Node, subject: str) -> str:
    """One row per operation: its arguments and answer keys by name, and what it does.

    An argument or key marked `?` may be left out. Tools are named by their tool name, other
    operations by method and path.
    """
    rows: list[tuple[str, ...]] = []
    for method, path, operation in _operations_in(document, subject):
        found = _answer_schema(document, operation)
        answers = ""
        if found is not None:
            status, answer_schema = found
            keys = list(answer_schema.get("properties", {}))
            answers = _names(keys, set(answer_schema.get("required", [])))
            if status != "200":
                answers = f"{status}: {answers}"
        tool = path.removeprefix("/v1/tools/") if path.startswith("/v1/tools/") else ""
        rows.append(
            (
                f"`{tool}`" if tool else f"`{method} {path}`",
                _argument_names(document, operation),
                answers,
                operation["description"].split(". ")[0].rstrip("."),
            )
        )
    if not rows:
        raise UnknownSection(f"the OpenAPI document has no operation under {subject}")
    return _table(("operation", "arguments", "answer", "what it does"), rows)


# What each kind of marker renders. The error-code table joins here once the codes are an
# enum (issue 44, "One source per rule"): an `errors` renderer reading the document's
# components Error<status> (each lists its status's codes) or the enum itself.
SECTIONS: dict[str, Callable[[Node, str], str]] = {
    "arguments": arguments,
    "answer": answer,
    "schema": schema,
    "operations": operations,
}


# ------------------------------------------------------------------ docs/API.md


def sections(text: str) -> list[Section]:
    """The generated blocks of a Markdown text, in order."""
    return [
        Section(match["kind"], match["subject"].strip(), match["body"])
        for match in BLOCK.finditer(text)
    ]


def render(document: Node, section: Section) -> str:
    renderer = SECTIONS.get(section.kind)
    if renderer is None:
        raise UnknownSection(f"no kind of table {section.kind!r} (known: {sorted(SECTIONS)})")
    return renderer(document, section.subject)


def rendered(document: Node, text: str) -> str:
    """`text` with every generated block rendered afresh from `document`."""

    def replace(match: re.Match[str]) -> str:
        section = Section(match["kind"], match["subject"].strip(), match["body"])
        return match["open"] + render(document, section) + match["close"]

    return BLOCK.sub(replace, text)


def stale(document: Node, text: str) -> list[str]:
    """The names of the blocks whose text differs from what `document` renders."""
    return [s.name for s in sections(text) if s.body != render(document, s)]


def openapi_document() -> Node:
    """The document the broker serves, as JSON reads it (so keys and values are plain)."""
    from lobbies.api.openapi import generate

    loaded: Node = json.loads(json.dumps(generate(API_URLS)))
    return loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pocolobby.api_docs",
        description="Render docs/API.md's tables from the OpenAPI document.",
    )
    parser.add_argument("--write", action="store_true", help="rewrite docs/API.md's tables")
    parser.add_argument("--path", type=Path, default=API_MD, help="the Markdown file")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
    import django

    django.setup()
    document = openapi_document()
    text = args.path.read_text()
    if args.write:
        new = rendered(document, text)
        if new != text:
            args.path.write_text(new)
        print(f"{args.path}: {len(sections(new))} tables rendered")
        return 0
    out_of_date = stale(document, text)
    for name in out_of_date:
        print(f"{args.path}: the table '{name}' differs from the OpenAPI document")
    if out_of_date:
        print(f"run: {WRITE_COMMAND}")
    return 1 if out_of_date else 0


if __name__ == "__main__":
    sys.exit(main())
