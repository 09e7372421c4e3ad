"""The published contract: an OpenAPI 3.1 document generated from the /v1 routes themselves.

Nothing here lists a route or a field. The generator walks a URL configuration; every view
on it states its operations (`lobbies.api.http.Documented`: the pydantic models it parses its
arguments with, the TypedDict its answer is built as, its error statuses, its token), and the
schemas come from those types, the same ones that validate the requests and type the answers.
A route whose view says nothing, or a method it serves without saying how, fails the
generation: the document cannot silently miss an operation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version

from django.urls import URLPattern, URLResolver, get_resolver
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode, JsonSchemaValue

from lobbies.api.answers import AnswerShape
from lobbies.api.http import Documented, View
from lobbies.errors import ERROR_CODES

OPENAPI_VERSION = "3.1.0"

# What every operation of a kind can answer besides its own errors.
_EVERY = (400, 401, 403)  # bad JSON or Host; no or wrong token; an Origin header
_AGENT = (503,)  # restore mode refuses every agent token
_WITH_BODY = (413,)  # a body over POCOLOBBY_REQUEST_BYTES
_WITH_PATH_PARAMETER = (404,)  # no such lobby, agent...

_ERROR_WORDS = {
    400: "Bad input: the message names what was wrong; nothing was stored",
    401: "No token, or not a valid one for this route",
    403: "Refused: an Origin header, a disabled agent, or a missing permission",
    404: "No such route, operation or target",
    405: "Another method serves this path",
    409: "A conflict with the stored state; nothing changed",
    410: "The uploader's attachment expired (everyone else gets 404)",
    411: "An upload without Content-Length",
    413: "The body, a file, or a broadcast's fan-out is over its bound",
    415: "An upload whose Content-Type is not an attachment type",
    429: "The sender's send rate is over its bound: retry after `retry_after` seconds",
    503: (
        "The broker is in restore mode (agents), its store does not answer (health), or "
        "uploads hold the upload memory (retry)"
    ),
    507: "The store, the lobby or the recipient is out of room",
}

_PARAMETER = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")

SECURITY_SCHEMES = {
    "agentToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "An agent token (plt_…) from `pocolobby agent add` or `rotate`",
    },
    "adminToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "The broker's admin token: POCOLOBBY_ADMIN_TOKEN or <data dir>/admin-token",
    },
}
_SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "agent": [{"agentToken": []}],
    "admin": [{"adminToken": []}],
    "none": [],
}


class Undocumented(Exception):
    """A route or method under the URL configuration states no operation for the document."""


def _routes(
    patterns: list[URLPattern | URLResolver], prefix: str = ""
) -> Iterator[tuple[str, View]]:
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        else:
            yield route, pattern.callback


def _operations(urlconf: str) -> Iterator[tuple[str, list[str], Documented, View]]:
    """(path template, its path parameters, operation, view) for every documented operation."""
    for route, view in _routes(get_resolver(urlconf).url_patterns):
        docs: tuple[Documented, ...] = getattr(view, "openapi", ())
        if not docs:
            raise Undocumented(f"/{route} states no operation for the OpenAPI document")
        served = set(getattr(view, "methods", ()))
        if served and served != {doc.method for doc in docs}:
            raise Undocumented(
                f"/{route} serves {sorted(served)} but states {sorted(d.method for d in docs)}"
            )
        for doc in docs:
            bound = dict(doc.bind)
            path = "/" + route
            names: list[str] = []
            for match in _PARAMETER.finditer(route):
                name = match.group("name")
                if name in bound:
                    path = path.replace(match.group(0), bound[name])
                else:
                    path = path.replace(match.group(0), "{" + name + "}")
                    names.append(name)
            unknown = set(bound) - {m.group("name") for m in _PARAMETER.finditer(route)}
            if unknown:
                raise Undocumented(f"/{route} binds no parameter {sorted(unknown)}")
            yield path, names, doc, view


# A request model (validated) or an answer's TypedDict (serialized), as the schema is keyed.
Shape = type[BaseModel] | AnswerShape


def _models(urlconf: str) -> list[tuple[Shape, JsonSchemaMode]]:
    seen: dict[tuple[Shape, JsonSchemaMode], None] = {}
    for _path, _names, doc, _view in _operations(urlconf):
        for model, mode in ((doc.body, "validation"), (doc.query, "validation")):
            if model is not None:
                seen[(model, mode)] = None  # type: ignore[index]
        for answer in (doc.answer, *(model for _status, model in doc.others)):
            if answer is not None:
                seen[(answer, "serialization")] = None
    return list(seen)


def _error_schema(status: int) -> JsonSchemaValue:
    return {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "enum": [c.value for c in ERROR_CODES[status]]},
                    "message": {"type": "string"},
                    "retry_after": {"type": "integer", "minimum": 1},
                    "message_id": {"type": "integer"},
                    "message_ids": {"type": "array", "items": {"type": "integer"}},
                },
                "additionalProperties": True,
            }
        },
        "additionalProperties": False,
    }


def _error_response(status: int) -> JsonSchemaValue:
    response: JsonSchemaValue = {
        "description": _ERROR_WORDS[status],
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/Error{status}"}}
        },
    }
    if status == 429:
        response["headers"] = {
            "Retry-After": {
                "description": "Seconds until a send may succeed again",
                "schema": {"type": "string", "pattern": r"^[0-9]+$"},
            }
        }
    return response


def _summary(doc: Documented, view: View) -> tuple[str, str]:
    text = doc.summary or (doc.body.__doc__ if doc.body else "") or getattr(view, "__doc__", "")
    text = " ".join((text or "").split())
    first = text.split(". ")[0].rstrip(".")
    return first[:120], text


def _present(spec: JsonSchemaValue) -> JsonSchemaValue:
    """A query parameter's schema: it is absent or a string, never JSON null."""
    schema = {k: v for k, v in spec.items() if k not in ("title", "description")}
    if schema.get("default", ...) is None:
        del schema["default"]
    choices = [c for c in schema.get("anyOf", []) if c != {"type": "null"}]
    if "anyOf" in schema and len(choices) == 1:
        del schema["anyOf"]
        schema.update(choices[0])
    return schema


def _query_parameters(schema: JsonSchemaValue) -> list[JsonSchemaValue]:
    required = set(schema.get("required", []))
    parameters = []
    for name, spec in schema.get("properties", {}).items():
        parameter: JsonSchemaValue = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": _present(spec),
        }
        if "description" in spec:
            parameter["description"] = spec["description"]
        parameters.append(parameter)
    return parameters


def _operation_id(method: str, path: str) -> str:
    return method.lower() + re.sub(r"[^A-Za-z0-9]+", "_", path).rstrip("_")


def generate(urlconf: str, *, title: str = "PocoLobby /v1") -> JsonSchemaValue:
    """The OpenAPI 3.1 document of every operation under `urlconf` (a module path)."""
    keys, definitions = TypeAdapter.json_schemas(
        [(model, mode, TypeAdapter(model)) for model, mode in _models(urlconf)],
        ref_template="#/components/schemas/{model}",
        by_alias=True,
    )
    components: JsonSchemaValue = dict(definitions.get("$defs", {}))

    def schema_of(model: Shape, mode: JsonSchemaMode) -> JsonSchemaValue:
        return dict(keys[(model, mode)])

    def resolved(model: Shape, mode: JsonSchemaMode) -> JsonSchemaValue:
        schema = schema_of(model, mode)
        ref = schema.get("$ref", "")
        return components[ref.rsplit("/", 1)[-1]] if ref else schema

    statuses_used: set[int] = set()
    paths: dict[str, JsonSchemaValue] = {}
    for path, names, doc, view in _operations(urlconf):
        summary, description = _summary(doc, view)
        errors = {*_EVERY, *doc.errors}
        if doc.auth == "agent":
            errors.update(_AGENT)
        if doc.auth == "none":
            errors.discard(401)
        if doc.method != "GET":
            errors.update(_WITH_BODY)
        if names:
            errors.update(_WITH_PATH_PARAMETER)
        statuses_used.update(errors)
        answer = (
            {"type": "object"} if doc.answer is None else schema_of(doc.answer, "serialization")
        )
        content = (
            {doc.raw_answer: {"schema": {"type": "string", "format": "binary"}}}
            if doc.raw_answer is not None
            else {"application/json": {"schema": answer}}
        )
        responses: JsonSchemaValue = {
            str(status): {"description": "Done" if status < 300 else "", "content": content}
            for status in doc.statuses
        }
        if 201 in doc.statuses:
            responses["201"]["description"] = "Created"
            if 200 in doc.statuses:
                responses["200"]["description"] = "It existed already; changed as asked"
        for status in sorted(errors):
            responses[str(status)] = {"$ref": f"#/components/responses/Error{status}"}
        for status, model in doc.others:
            responses[str(status)] = {
                "description": _ERROR_WORDS.get(status, ""),
                "content": {"application/json": {"schema": schema_of(model, "serialization")}},
            }
        operation: JsonSchemaValue = {
            "operationId": _operation_id(doc.method, path),
            "summary": summary,
            "description": description,
            "security": _SECURITY[doc.auth],
            "responses": responses,
        }
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in names
        ]
        if doc.query is not None:
            parameters += _query_parameters(resolved(doc.query, "validation"))
        if parameters:
            operation["parameters"] = parameters
        if doc.body is not None:
            body_schema = resolved(doc.body, "validation")
            operation["requestBody"] = {
                "required": bool(body_schema.get("required")),
                "content": {"application/json": {"schema": schema_of(doc.body, "validation")}},
            }
        if doc.raw_body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {doc.raw_body: {"schema": {"type": "string", "format": "binary"}}},
            }
        if doc.method.lower() in paths.get(path, {}):
            raise Undocumented(f"{doc.method} {path} is stated twice")
        paths.setdefault(path, {})[doc.method.lower()] = operation
    for status in sorted(statuses_used):
        components[f"Error{status}"] = _error_schema(status)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": _release(),
            "description": (
                "Generated from the pydantic models and the tool catalog that validate the "
                "requests and the TypedDicts the answers are built as (lobbies/api/openapi.py); "
                "docs/API.md tells the behaviour."
            ),
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.items())),
            "responses": {
                f"Error{status}": _error_response(status) for status in sorted(statuses_used)
            },
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


def _release() -> str:
    try:
        return version("pocolobby")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def document(urlconf: str) -> JsonSchemaValue:
    """`generate`, once per process: the routes and models are code. Read it, never change it."""
    return generate(urlconf)
