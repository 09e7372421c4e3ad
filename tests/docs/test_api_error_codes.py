"""docs/API.md lists exactly the error codes the code can answer (issue 13 §8).

The codes are collected from the source by its syntax tree, not from a hand list: every
`BrokerError(...)` and error helper call, every `PageRefusal(...)`, and every literal
`{"code": ..., "message": ...}` error body. A code passed as a variable fails the scan, so a
new way of answering an error cannot slip past it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("lobbies", "console", "board", "pocolobby")
# Where the code argument sits in each way of refusing: (position, keyword, default).
REFUSALS: dict[str, tuple[int, str, str | None]] = {
    "BrokerError": (1, "code", None),
    "bad_request": (1, "code", "invalid_arguments"),
    "not_found": (0, "code", None),
    "conflict": (0, "code", None),
    "forbidden": (0, "code", None),
    "PageRefusal": (2, "code", "refused"),
    "_error": (0, "code", None),  # an error frame on the stream
    "close_sockets_on_commit": (1, "code", None),  # the close reason's code
}
# Functions that pass on a code collected at their callers; the bridge answers no HTTP.
# lobbies/errors.py's helpers that name their own code (request_too_large,
# method_not_allowed) are scanned like any refusal.
PASS_THROUGH = {
    ("lobbies/errors.py", "__init__"),
    ("lobbies/errors.py", "as_json"),
    ("lobbies/errors.py", "bad_request"),
    ("lobbies/errors.py", "not_found"),
    ("lobbies/errors.py", "conflict"),
    ("lobbies/errors.py", "forbidden"),
    ("lobbies/push/consumers.py", "agent_close"),
    ("lobbies/push/consumers.py", "_error"),
    ("lobbies/push/consumers.py", "_frame_refused"),
    ("lobbies/push/consumers.py", "_refuse"),  # the refusal's code, collected where it is raised
    ("lobbies/push/events.py", "close_sockets_on_commit"),
    ("console/pages.py", "_refused"),
    ("console/web.py", "refusal_response"),
    ("pocolobby/msg.py", "failure_json"),  # prints the broker's code (or the client's) as is
    ("lobbies/api/openapi.py", "_error_schema"),  # the error shape's JSON Schema, not an answer
    ("lobbies/wire/frames.py", "parse_error"),  # reads the broker's error frame, answers nothing
}
# A table row whose first cell is an HTTP status, a WebSocket close code or "frame".
STATUS_ROW = re.compile(r"^\|\s*(?:\d{3,4}|frame)\s*\|\s*([^|]+)\|")


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _code_of(call: ast.Call, position: int, keyword: str, default: str | None) -> ast.expr | str:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if len(call.args) > position:
        return call.args[position]
    return default or call


def _nodes_in_functions(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """Every node with the name of the function (or "") it sits in."""
    found: list[tuple[str, ast.AST]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                else function
            )
            found.append((inner, child))
            visit(child, inner)

    visit(tree, "")
    return found


def codes_in_source() -> tuple[set[str], list[str]]:
    """(codes answered, places whose code is not a literal)."""
    codes: set[str] = set()
    unresolved: list[str] = []
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "bridge" in relative.parts or "migrations" in relative.parts:
                continue
            tree = ast.parse(path.read_text(), str(relative))
            for function, node in _nodes_in_functions(tree):
                if {(str(relative), "*"), (str(relative), function)} & PASS_THROUGH:
                    continue
                if isinstance(node, ast.Call) and _name(node.func) in REFUSALS:
                    code = _code_of(node, *REFUSALS[_name(node.func)])
                    if isinstance(code, ast.IfExp):  # one literal or the other
                        branches = [code.body, code.orelse]
                        if all(isinstance(b, ast.Constant) for b in branches):
                            codes |= {b.value for b in branches}  # type: ignore[attr-defined]
                            continue
                    if isinstance(code, str):
                        codes.add(code)
                    elif isinstance(code, ast.Constant) and isinstance(code.value, str):
                        codes.add(code.value)
                    else:
                        unresolved.append(f"{relative}:{node.lineno}")
                elif isinstance(node, ast.Dict):
                    keys = {
                        k.value: v
                        for k, v in zip(node.keys, node.values, strict=True)
                        if isinstance(k, ast.Constant)
                    }
                    if {"code", "message"} <= keys.keys():
                        code = keys["code"]
                        if isinstance(code, ast.Constant) and isinstance(code.value, str):
                            codes.add(code.value)
                        else:
                            unresolved.append(f"{relative}:{node.lineno}")
    return codes, unresolved


def codes_in_api_md() -> set[str]:
    codes: set[str] = set()
    for line in (ROOT / "docs" / "API.md").read_text().splitlines():
        row = STATUS_ROW.match(line)
        if row:
            codes |= set(re.findall(r"`([a-z_]+)`", row.group(1)))
    return codes


def test_every_code_is_passed_as_a_literal_the_scan_can_read():
    _, unresolved = codes_in_source()
    assert unresolved == []


def test_every_error_code_the_code_can_answer_is_in_api_md():
    answered, _ = codes_in_source()
    assert answered - codes_in_api_md() == set()


def test_every_error_code_api_md_lists_exists_in_the_code():
    answered, _ = codes_in_source()
    assert codes_in_api_md() - answered == set()


def test_the_scan_finds_the_codes_it_must():
    answered, _ = codes_in_source()
    assert {
        "invalid_arguments",
        "rate_limited",
        "internal_error",
        "throttled",
        "request_too_large",  # named inside its helper in lobbies/errors.py
        "method_not_allowed",
    } <= answered
