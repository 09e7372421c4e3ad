"""Every write an agent makes through a bridge is fenced by its runtime generation, as
send_message is: a superseded process changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from lobbies.actions.rooms import create_room
from lobbies.actions.runtime import claim_runtime
from tests.lobbies.test_refusals_store_nothing import store_rows

HOLDER = "0b5e7a8c-1d2e-4f3a-9b8c-7d6e5f4a3b2c"
FENCED_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("send_message", {"to": "backend", "content": "x", "client_request_id": "f-1"}),
    (
        "schedule_message",
        {
            "client_request_id": "f-2",
            "to": "backend",
            "content": "x",
            "time_zone": "UTC",
            "times": ["09:00"],
        },
    ),
    ("cancel_scheduled", {"schedule_id": 1}),
    ("update_scheduled", {"message_id": 1, "content": "y"}),
    ("create_room", {"room_id": "new-room", "members": ["backend"]}),
    ("set_room_members", {"room_id": "ops", "members": ["lead"]}),
    ("add_room_members", {"room_id": "ops", "members": ["backend"]}),
    ("remove_room_members", {"room_id": "ops", "members": ["backend"]}),
    ("delete_room", {"room_id": "ops"}),
    ("rest_agents", {"agent_ids": ["backend"], "rest": True}),
]


def _call(token: str, tool: str, generation: int, arguments: dict[str, Any]) -> Any:
    return Client().post(
        f"/v1/tools/{tool}",
        data=json.dumps(arguments),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_X_POCOLOBBY_RUNTIME=HOLDER,
        HTTP_X_POCOLOBBY_GENERATION=str(generation),
    )


@pytest.fixture
def bound_lead(lead, backend):
    create_room(lead.agent, "ops", ["lead", "backend"])
    claim = claim_runtime(lead.agent, HOLDER, None)
    claim_runtime(lead.agent, HOLDER, None)  # a restart: the first generation is superseded
    return lead, claim.generation


@pytest.mark.parametrize(("tool", "arguments"), FENCED_CALLS, ids=[c[0] for c in FENCED_CALLS])
def test_a_superseded_generation_changes_nothing(bound_lead, tool, arguments):
    lead, superseded = bound_lead
    before = store_rows()
    response = _call(lead.token, tool, superseded, arguments)
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "generation_superseded"
    assert store_rows() == before


@pytest.mark.parametrize("tool", ["schedule_message", "create_room", "rest_agents"])
def test_the_current_generation_may_write(bound_lead, tool):
    lead, superseded = bound_lead
    arguments = dict(FENCED_CALLS)[tool]
    assert _call(lead.token, tool, superseded + 1, arguments).status_code == 200
