"""`GET /v1/me`: an agent's token learns its own standing (accepted, enabled, paused, resting)
without a runtime, so a check such as `pocolobby doctor` disturbs no session."""

from __future__ import annotations

from typing import Any

from lobbies.actions import operator
from lobbies.actions.owner import set_delivery_paused
from lobbies.models import Agent
from tests.conftest import AgentClient


def _me(agent: AgentClient) -> tuple[int, dict[str, Any]]:
    response = agent.client.get("/v1/me", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    return response.status_code, response.json()


def test_the_answer_says_paused_and_resting_and_claims_nothing(lead, backend):
    assert _me(backend) == (
        200,
        {
            "lobby": "my-team",
            "agent_id": "backend",
            "delivery_paused": False,
            "resting": False,
            "connected": False,
        },
    )
    set_delivery_paused("my-team", True)
    lead.ok("rest_agents", agent_ids=["backend"], rest=True)
    status, body = _me(backend)
    assert status == 200 and body["delivery_paused"] is True and body["resting"] is True
    row = Agent.objects.get(agent_id="backend")
    assert (row.runtime_id, row.runtime_generation) == (None, 0)


def test_a_disabled_agent_and_a_rotated_token_are_refused_by_name(backend):
    old = backend.token
    backend.token = operator.rotate_credential("my-team", "backend")
    backend_old = AgentClient(backend.agent, old, backend.client)
    assert _me(backend_old)[1]["error"]["code"] == "token_revoked"
    operator.disable_agent("my-team", "backend")
    status, body = _me(backend)
    assert (status, body["error"]["code"]) == (403, "agent_disabled")
