from __future__ import annotations

import json

import pytest
from django.test import Client

from lobbies.actions import operator
from lobbies.models import Credential, Message


def _post(token: str | None, body: object, **headers: str):
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    extra |= {f"HTTP_{k.upper()}": v for k, v in headers.items()}
    return Client().post(
        "/v1/messages", data=json.dumps(body), content_type="application/json", **extra
    )


SEND = {"to": "backend", "content": "x", "client_request_id": "r-1"}


def test_no_token_is_401(lead, backend):
    response = _post(None, SEND)
    assert response.status_code == 401 and response.json()["error"]["code"] == "missing_token"


def test_an_unknown_token_is_401(lead, backend):
    response = _post("plt_not-a-real-token", SEND)
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_token"


def test_a_rotated_token_is_revoked(lead, backend):
    new_token = operator.rotate_credential("my-team", "lead")
    response = _post(lead.token, SEND)
    assert response.status_code == 401 and response.json()["error"]["code"] == "token_revoked"
    assert _post(new_token, SEND).status_code == 200


def test_a_disabled_agent_is_403(lead, backend):
    operator.disable_agent("my-team", "lead")
    response = _post(lead.token, SEND)
    assert response.status_code == 403 and response.json()["error"]["code"] == "agent_disabled"


def test_a_request_with_an_origin_header_is_refused(lead, backend):
    response = _post(lead.token, SEND, origin="https://evil.example")
    assert response.status_code == 403 and response.json()["error"]["code"] == "origin_refused"
    assert Message.objects.count() == 0


def test_a_wrong_method_is_405_json(lead):
    response = Client().delete("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {lead.token}")
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [("/v1/messages", "GET, POST"), ("/v1/tools/send_message", "POST"), ("/v1/agents", "GET")],
)
def test_a_405_names_the_allowed_methods_in_an_allow_header(lead, path, allowed):
    """RFC 9110 requires it; schemathesis's contract run found it missing."""
    response = Client().generic("TRACE", path, HTTP_AUTHORIZATION=f"Bearer {lead.token}")
    assert response.status_code == 405 and response["Allow"] == allowed


def test_the_admin_api_refuses_agent_tokens(lead):
    response = Client().get("/v1/admin/status", HTTP_AUTHORIZATION=f"Bearer {lead.token}")
    assert response.status_code == 401


def test_tokens_are_stored_only_as_hashes(lead):
    stored = list(Credential.objects.values_list("token_hash", flat=True))
    assert lead.token not in stored and all(len(h) == 64 for h in stored)
