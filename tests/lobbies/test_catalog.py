from __future__ import annotations

import dataclasses

import pytest

from lobbies.api import catalog
from lobbies.api.answers import AgentList
from lobbies.api.schemas import ListAgents, SendMessage


def _tools(client) -> dict:
    response = client.client.get("/v1/tools", HTTP_AUTHORIZATION=f"Bearer {client.token}")
    assert response.status_code == 200
    return response.json()


def test_the_catalog_says_this_brokers_attachment_limits(backend, settings):
    """The bridge obeys these (pocolobby/bridge/files.py), so they are the settings' own."""
    settings.BOUNDS = dataclasses.replace(settings.BOUNDS, attachment_image_bytes=1000)
    assert _tools(backend)["attachment_limits"] == {
        "image_bytes": 1000,
        "document_bytes": settings.BOUNDS.attachment_document_bytes,
    }


def test_catalog_serves_schemas_generated_from_the_validating_models(backend):
    body = _tools(backend)
    tools = {t["name"]: t for t in body["tools"]}
    assert set(tools) >= {
        "send_message",
        "get_messages",
        "acknowledge_messages",
        "list_agents",
        "set_status",
        "set_owner_requests",
    }
    send = tools["send_message"]
    expected = SendMessage.model_json_schema()
    served = dict(send["input_schema"]["properties"])
    # The model lists local paths; the bridge sends the HTTP route descriptions instead.
    assert served.pop("attachments")["items"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 4096,
    }
    expected["properties"].pop("attachments")
    assert served == expected["properties"]
    assert set(send["input_schema"]["required"]) == {"to", "content", "client_request_id"}
    assert send["input_schema"]["additionalProperties"] is False
    assert "client_request_id" in send["description"]


def test_revision_is_stable_and_hashes_the_definitions(backend, monkeypatch):
    first = _tools(backend)["revision"]
    assert _tools(backend)["revision"] == first
    changed = catalog.Tool(
        "list_agents", ListAgents, lambda a, _: {}, AgentList, guidance="Reworded."
    )
    monkeypatch.setitem(catalog.TOOLS, "list_agents", changed)
    assert _tools(backend)["revision"] != first


def test_the_catalog_is_built_once_per_set_of_tools(lead, backend):
    """Every bridge reads it at every connect; its schemas are code, not data."""
    assert catalog.catalog_for(backend.agent) is catalog.catalog_for(backend.agent)
    assert catalog.catalog_for(lead.agent) != catalog.catalog_for(backend.agent)


def test_catalog_is_filtered_by_permission_and_dispatch_enforces_it(lead, backend, monkeypatch):
    gated = catalog.Tool(
        "list_agents_gated",
        ListAgents,
        lambda a, _: {"ok": True},
        AgentList,
        permission="manage_rooms",
    )
    monkeypatch.setitem(catalog.TOOLS, gated.name, gated)
    assert "list_agents_gated" in {t["name"] for t in _tools(lead)["tools"]}
    assert "list_agents_gated" not in {t["name"] for t in _tools(backend)["tools"]}
    assert lead.ok("list_agents_gated") == {"ok": True}
    status, body = backend.call("list_agents_gated")
    assert (status, body["error"]["code"]) == (403, "permission_required")


def test_unknown_tool_is_a_clear_404(backend):
    status, body = backend.call("drop_tables")
    assert (status, body["error"]["code"]) == (404, "unknown_tool")


@pytest.mark.parametrize("name", sorted(catalog.TOOLS))
def test_every_tool_has_a_description_and_an_object_schema(name):
    definition = catalog.TOOLS[name].definition()
    assert definition["description"] and definition["input_schema"]["type"] == "object"


def test_descriptions_say_what_issue_19_made_the_code_do(backend):
    tools = {t["name"]: t["description"] for t in _tools(backend)["tools"]}
    assert "its slot as `deliver_at`" in tools["schedule_message"]
    assert "records the checkpoint revision you loaded" in tools["ready"]
    assert "then save a checkpoint" in tools["ready"]
    assert "schedules' occurrences aside" in tools["list_agents"]
    assert "idle_seconds" in tools["list_agents"]
    assert "hello_request_id" in tools["get_context"]
