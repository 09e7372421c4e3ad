"""Pages refuse text holding NUL (U+0000) with a 400 naming where it was, before any view
reads it: a JSON form's field (an agent's display name or emoji, a push endpoint), a query
parameter, a URL-encoded form's field. PostgreSQL's text cannot hold a NUL (these were 500s
there) and SQLite stored the endpoint and pushed to it; nothing is stored on either."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from board.models import AgentAppearance, PushSubscription
from console.models import SignInThrottle
from lobbies.models import Lobby
from tests.board.dashboard_helpers import LOCAL_HOST, operator_client
from tests.board.notifications.webpush_service import Device
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

ORIGIN = f"http://{LOCAL_HOST}"


def _post(client: Client, path: str, body: Any) -> Any:
    return client.post(
        path, data=json.dumps(body), content_type="application/json", HTTP_ORIGIN=ORIGIN
    )


def _refused_json(answer: Any, where: str) -> None:
    error = answer.json()["error"]
    assert (answer.status_code, error["code"]) == (400, "invalid_text"), error
    assert where in error["message"] and "NUL" in error["message"], error


@pytest.mark.parametrize(
    ("look", "where"),
    [
        ({"emoji": "\u0000", "display_name": "Lead"}, "the field 'emoji'"),
        ({"emoji": "", "display_name": "Le\u0000ad"}, "the field 'display_name'"),
    ],
)
def test_a_nul_in_an_agents_display_name_or_emoji_is_refused(
    lead: AgentClient, look: dict[str, str], where: str
) -> None:
    answer = _post(
        operator_client(),
        "/my-team/settings/agents/appearance",
        {"agent": "lead", "hidden": False, **look},
    )
    _refused_json(answer, where)
    assert not AgentAppearance.objects.exists()


def test_a_nul_in_a_push_endpoint_is_refused_and_nothing_is_stored(lobby: Lobby) -> None:
    body = Device().subscription("https://push.example.com/send/a\u0000b")
    answer = _post(operator_client(), "/my-team/push/subscriptions", body)
    _refused_json(answer, "the field 'endpoint'")
    assert not PushSubscription.objects.exists()


def test_a_nul_in_a_query_parameter_is_a_400_page_naming_it(lobby: Lobby) -> None:
    answer = operator_client().get("/my-team/activity?page=%00")
    assert answer.status_code == 400
    assert "the query parameter &#x27;page&#x27;" in answer.content.decode()


def test_a_nul_in_a_url_encoded_form_field_is_refused_before_it_is_read(db: None) -> None:
    answer = Client(HTTP_HOST=LOCAL_HOST).post(
        "/admin/login/",
        data="username=ad%00min&password=x",
        content_type="application/x-www-form-urlencoded",
    )
    _refused_json(answer, "the field 'username'")
    assert not SignInThrottle.objects.exists()
