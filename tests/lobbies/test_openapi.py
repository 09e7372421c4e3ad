"""The OpenAPI document is generated from the views' own models, valid OpenAPI 3.1, and served.

The contract itself (answers conform, no 5xx) is fuzzed against a live broker in
tests/lobbies/test_openapi_contract.py.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import clear_url_caches, path
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from typing_extensions import TypedDict  # pydantic reads only its TypedDict on Python 3.11

from lobbies.api import answers, operator_answers
from lobbies.api.catalog import TOOLS
from lobbies.api.http import Documented, api_view
from lobbies.api.openapi import Undocumented, generate
from lobbies.api.operator_api import AGENT_ACTIONS
from lobbies.api.schemas import Operation, SendMessage
from lobbies.errors import ERROR_CODES

API_URLS = "pocolobby.urls_api"
API_MD = Path(__file__).resolve().parents[2] / "docs" / "API.md"


@pytest.fixture
def urlconf() -> Iterator[types.ModuleType]:
    """A URL configuration module of the test's own, importable by name."""
    module = types.ModuleType("tests_openapi_urls")
    module.urlpatterns = []  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]
    clear_url_caches()


def _schema(document: dict, ref_or_schema: dict) -> dict:
    ref = ref_or_schema.get("$ref")
    return document["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else ref_or_schema


def _body(document: dict, path: str, method: str = "post") -> dict:
    content = document["paths"][path][method]["requestBody"]["content"]
    return _schema(document, content["application/json"]["schema"])


def _answer(document: dict, path: str, method: str = "post", status: str = "200") -> dict:
    content = document["paths"][path][method]["responses"][status]["content"]
    return _schema(document, content["application/json"]["schema"])


def test_the_document_is_valid_openapi_3_1():
    document = generate(API_URLS)
    assert document["openapi"] == "3.1.0"
    validate(document, cls=OpenAPIV31SpecValidator)


def test_a_field_added_to_a_model_shows_up_in_the_document(urlconf):
    class Note(Operation):
        """Leave a note."""

        text: str

    class Noted(TypedDict):
        saved: bool

    def routes(body: type[Operation], answer: answers.AnswerShape) -> list:
        @api_view(("POST",), Documented("POST", answer, body=body))
        def note(request: HttpRequest) -> JsonResponse:
            return JsonResponse({})

        return [path("v1/notes", note)]

    urlconf.urlpatterns = routes(Note, Noted)
    before = generate(urlconf.__name__)
    assert set(_body(before, "/v1/notes")["properties"]) == {"text"}
    assert set(_answer(before, "/v1/notes")["properties"]) == {"saved"}

    class WiderNote(Note):
        pinned: bool = False

    class WiderNoted(Noted):
        pinned: bool

    urlconf.urlpatterns = routes(WiderNote, WiderNoted)
    clear_url_caches()  # Django keeps a resolver per URL configuration
    after = generate(urlconf.__name__)
    assert set(_body(after, "/v1/notes")["properties"]) == {"text", "pinned"}
    assert _answer(after, "/v1/notes")["required"] == ["saved", "pinned"]
    validate(after, cls=OpenAPIV31SpecValidator)


def test_a_route_that_states_no_operation_fails_the_generation(urlconf):
    def plain(request: HttpRequest) -> JsonResponse:
        return JsonResponse({})

    urlconf.urlpatterns = [path("v1/plain", plain)]
    with pytest.raises(Undocumented, match="/v1/plain"):
        generate(urlconf.__name__)


def test_a_method_a_view_serves_without_stating_it_fails_the_generation(urlconf):
    @api_view(("GET", "POST"), Documented("GET", operator_answers.Deleted))
    def half(request: HttpRequest) -> JsonResponse:
        return JsonResponse({})

    urlconf.urlpatterns = [path("v1/half", half)]
    with pytest.raises(Undocumented, match=r"/v1/half serves \['GET', 'POST'\]"):
        generate(urlconf.__name__)


def test_a_body_of_bytes_is_documented_by_its_media_type(urlconf):
    @api_view(
        ("PUT",), Documented("PUT", operator_answers.Deleted, raw_body="application/octet-stream")
    )
    def upload(request: HttpRequest, digest: str) -> JsonResponse:
        return JsonResponse({})

    urlconf.urlpatterns = [path("v1/files/<str:digest>", upload)]
    document = generate(urlconf.__name__)
    operation = document["paths"]["/v1/files/{digest}"]["put"]
    assert operation["requestBody"]["content"] == {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
    }
    assert {"404", "413"} <= set(operation["responses"])
    validate(document, cls=OpenAPIV31SpecValidator)


def test_every_tool_of_the_catalog_is_an_operation_with_its_own_schema():
    document = generate(API_URLS)
    for name, tool in TOOLS.items():
        body = _body(document, f"/v1/tools/{name}")
        catalog = tool.schema.model_json_schema()
        assert set(body.get("properties", {})) == set(catalog.get("properties", {})), name
        assert body.get("required", []) == catalog.get("required", []), name
        assert _answer(document, f"/v1/tools/{name}")["title"] == tool.answer.__name__


def test_the_rest_routes_take_the_same_schema_as_their_tools():
    document = generate(API_URLS)
    assert _body(document, "/v1/messages") == _body(document, "/v1/tools/send_message")
    send = set(_body(document, "/v1/messages")["properties"])
    assert send == set(SendMessage.model_fields)
    query = {p["name"] for p in document["paths"]["/v1/messages"]["get"]["parameters"]}
    assert query == {"view", "query", "limit", "cursor"}


def test_every_agent_action_of_the_operator_is_its_own_path():
    paths = generate(API_URLS)["paths"]
    for action in AGENT_ACTIONS:
        assert "post" in paths[f"/v1/admin/lobbies/{{lobby}}/agents/{{agent_id}}/{action}"]


def test_each_operation_names_its_token_and_the_error_shape():
    document = generate(API_URLS)
    security = {
        (method, route): operation["security"]
        for route, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert security[("post", "/v1/messages")] == [{"agentToken": []}]
    assert security[("get", "/v1/admin/status")] == [{"adminToken": []}]
    assert security[("get", "/v1/health")] == []
    assert security[("get", "/v1/openapi.json")] == []
    responses = document["paths"]["/v1/messages"]["post"]["responses"]
    assert {"400", "401", "403", "404", "409", "413", "429", "503", "507"} <= set(responses)
    error = document["components"]["schemas"]["Error409"]["properties"]["error"]
    assert error["required"] == ["code", "message"]
    assert "idempotency_conflict" in error["properties"]["code"]["enum"]


def _documented_codes() -> dict[int, set[str]]:
    """The first table of docs/API.md's "Errors" section, by status."""
    text = API_MD.read_text()
    section = text[text.index("\n## Errors") : text.index("\n## ", text.index("\n## Errors") + 1)]
    codes: dict[int, set[str]] = {}
    for status, cell in re.findall(r"^\| (\d{3}) \| ([^|]+) \|", section, re.MULTILINE):
        codes.setdefault(int(status), set()).update(re.findall(r"`([a-z_]+)`", cell))
    return codes


def test_the_documents_error_codes_are_the_ones_api_md_lists():
    assert {status: set(codes) for status, codes in ERROR_CODES.items()} == _documented_codes()


@pytest.mark.django_db
def test_the_document_is_served_without_a_token():
    response = Client().get("/v1/openapi.json")
    assert response.status_code == 200
    assert response.json() == generate(API_URLS)


@pytest.mark.django_db
def test_the_document_is_refused_to_a_browser_page_like_every_v1_route():
    response = Client().get("/v1/openapi.json", HTTP_ORIGIN="https://example.com")
    assert response.status_code == 403 and response.json()["error"]["code"] == "origin_refused"
