"""The broker's tool catalog as data: parsed, checked, compared between revisions.

Tools are data on the broker (`GET /v1/tools`); the bridge carries no copy. It exposes what
the last good catalog lists, and since a running Claude Code keeps the first schema it loaded
for a named tool, it also tells the model in words when a revision adds operations or
arguments, so `list_operations` and `call_operation` reach them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lobbies.wire.jsontext import JSONObject, JSONValue
from lobbies.wire.media import DEFAULT_ATTACHMENT_LIMITS, AttachmentLimits, parse_attachment_limits

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
MAX_TOOLS = 200


class CatalogError(ValueError):
    """The broker's answer is not a catalog this bridge can expose; the last good one stays."""


@dataclass(frozen=True)
class Operation:
    name: str
    description: str
    input_schema: JSONObject

    @property
    def arguments(self) -> tuple[str, ...]:
        properties = self.input_schema.get("properties")
        return tuple(properties) if isinstance(properties, dict) else ()

    def definition(self) -> JSONObject:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


def _default_limits() -> AttachmentLimits:
    return {**DEFAULT_ATTACHMENT_LIMITS}


@dataclass(frozen=True)
class Catalog:
    revision: str
    operations: dict[str, Operation]
    # The broker's per-file limits; the defaults for a broker that does not send them.
    limits: AttachmentLimits = field(default_factory=_default_limits)

    @classmethod
    def parse(cls, data: JSONValue) -> Catalog:
        """Check the shape of `GET /v1/tools`; CatalogError says what is wrong."""
        if not isinstance(data, dict):
            raise CatalogError("the catalog is not a JSON object")
        revision = data.get("revision")
        tools = data.get("tools")
        if not isinstance(revision, str) or not revision:
            raise CatalogError("the catalog has no revision")
        if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
            raise CatalogError("the catalog's tools are not a list of at most 200")
        operations: dict[str, Operation] = {}
        for index, tool in enumerate(tools):
            operation = _operation(tool, index)
            if operation.name in operations:
                raise CatalogError(f"the catalog lists {operation.name!r} twice")
            operations[operation.name] = operation
        limits = parse_attachment_limits(data.get("attachment_limits"))
        return cls(revision, operations, limits or _default_limits())

    def get(self, name: str) -> Operation | None:
        return self.operations.get(name)


def _operation(tool: JSONValue, index: int) -> Operation:
    if not isinstance(tool, dict):
        raise CatalogError(f"tool {index} is not an object")
    name = tool.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise CatalogError(f"tool {index} has no valid name")
    description = tool.get("description", "")
    schema = tool.get("input_schema")
    if not isinstance(description, str):
        raise CatalogError(f"{name}: description is not a string")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise CatalogError(f"{name}: input_schema is not an object schema")
    if not isinstance(schema.get("properties", {}), dict):
        raise CatalogError(f"{name}: input_schema.properties is not an object")
    return Operation(name, description, schema)


@dataclass(frozen=True)
class CatalogChange:
    """What a newer revision adds or removes, as the model would need to know it."""

    revision: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    new_arguments: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.new_arguments)

    def sentence(self) -> str:
        parts = []
        if self.added:
            parts.append("new operations " + ", ".join(self.added))
        if self.new_arguments:
            described = "; ".join(
                f"{name} ({', '.join(args)})" for name, args in self.new_arguments
            )
            parts.append("new arguments for " + described)
        if self.removed:
            parts.append("removed operations " + ", ".join(self.removed))
        return (
            f"PocoLobby tools changed (catalog revision {self.revision}): {'; '.join(parts)}. "
            "Your tool list may still show older schemas: list_operations shows the current "
            'ones, and call_operation with {"name", "arguments"} runs any operation with '
            "any of its arguments."
        )


def compare(seen: Catalog, current: Catalog) -> CatalogChange:
    """Additions and removals since `seen`; wording-only changes compare as nothing."""
    added = tuple(n for n in current.operations if n not in seen.operations)
    removed = tuple(n for n in seen.operations if n not in current.operations)
    new_arguments = []
    for name, operation in current.operations.items():
        before = seen.operations.get(name)
        if before is None:
            continue
        fresh = tuple(a for a in operation.arguments if a not in before.arguments)
        if fresh:
            new_arguments.append((name, fresh))
    return CatalogChange(current.revision, added, removed, tuple(new_arguments))


def _first_sentence(text: str, limit: int = 160) -> str:
    sentence = text.strip().split(". ", 1)[0].strip()
    if len(sentence) > limit:
        sentence = sentence[: limit - 1].rstrip() + "…"
    return sentence.rstrip(".")


def _argument_hint(schema: JSONValue) -> str:
    if not isinstance(schema, dict):
        return ""
    description = schema.get("description")
    if isinstance(description, str) and description.strip():
        return _first_sentence(description, 120)
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    options = schema.get("anyOf")
    if isinstance(options, list):
        kinds = [o.get("type") for o in options if isinstance(o, dict)]
        return " or ".join(k for k in kinds if isinstance(k, str))
    return ""


def local_guide(catalog: Catalog) -> JSONObject:
    """A compact guide made here, for a broker whose get_context does not bring its own."""
    guide: JSONObject = {}
    for name, operation in catalog.operations.items():
        properties = operation.input_schema.get("properties")
        if not isinstance(properties, dict):
            properties = {}
        required = operation.input_schema.get("required", [])
        arguments: JSONObject = {}
        for argument, schema in properties.items():
            hint = _argument_hint(schema)
            if isinstance(required, list) and argument in required:
                hint = f"required; {hint}" if hint else "required"
            arguments[argument] = hint
        guide[name] = {"purpose": _first_sentence(operation.description), "arguments": arguments}
    return guide
