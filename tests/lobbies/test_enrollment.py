"""Enrolment codes through the admin route and `POST /v1/join`, in process, on the test
database of either store: stored as hashes, redeemed once, expired, guessing bounded."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from lobbies.actions.enrollment import REFUSALS_PER_WINDOW, code_hash
from lobbies.models import AuditEvent, Credential, Enrollment
from tests.lobbies.test_operator_api import admin


@pytest.fixture
def backend(db) -> None:
    assert admin("post", "/lobbies", {"name": "my-team"}).status_code == 201
    assert admin("post", "/lobbies/my-team/agents", {"agent_id": "backend"}).status_code == 201


def join(code: str, address: str = "127.0.0.1"):
    return Client(REMOTE_ADDR=address).post(
        "/v1/join", data=json.dumps({"code": code}), content_type="application/json"
    )


def enroll(minutes: int = 15) -> str:
    answer = admin("post", "/lobbies/my-team/agents/backend/enroll", {"expires_minutes": minutes})
    assert answer.status_code == 200, answer.content
    return answer.json()["code"]


def test_a_code_is_stored_as_its_hash_and_redeemed_once_for_a_new_token(backend):
    old = Credential.objects.get()
    code = enroll()
    assert Enrollment.objects.get().code_hash == code_hash(code) != code
    redeemed = join(code.lower())
    assert redeemed.status_code == 200, redeemed.content
    assert redeemed.json()["agent"] == "backend" and redeemed.json()["lobby"] == "my-team"
    old.refresh_from_db()
    assert old.revoked_at is not None
    assert Credential.objects.filter(revoked_at__isnull=True).count() == 1

    again = join(code)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "code_used")
    assert Credential.objects.count() == 2
    actions = list(AuditEvent.objects.values_list("action", flat=True))
    assert actions.count("enrollment_issued") == 1 and actions.count("enrollment_redeemed") == 1


def test_an_expired_code_issues_nothing(backend):
    code = enroll(5)
    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        late = join(code)
    assert (late.status_code, late.json()["error"]["code"]) == (410, "code_expired")
    assert Credential.objects.filter(revoked_at__isnull=True).count() == 1
    assert Enrollment.objects.get().redeemed_at is None


@pytest.mark.parametrize("minutes", [0, -1, 10081])
def test_a_lifetime_out_of_bounds_is_refused(backend, minutes):
    answer = admin("post", "/lobbies/my-team/agents/backend/enroll", {"expires_minutes": minutes})
    assert answer.status_code == 400 and "expires_minutes" in answer.json()["error"]["message"]
    assert not Enrollment.objects.exists()


def test_wrong_codes_are_bounded_per_network_not_for_everyone(backend):
    for n in range(REFUSALS_PER_WINDOW):
        assert join(f"WRONG-{n}", "127.0.0.2").json()["error"]["code"] == "unknown_code"
    refused = join(enroll(), "127.0.0.2")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert Credential.objects.filter(revoked_at__isnull=True).count() == 1
    # Another network still redeems the live code.
    assert join(Enrollment.objects.get().code_hash, "127.0.0.3").status_code == 404
    code = enroll()
    assert join(code, "127.0.0.3").status_code == 200


def test_the_admin_token_is_needed_to_issue_a_code(backend):
    answer = Client().post(
        "/v1/admin/lobbies/my-team/agents/backend/enroll", HTTP_AUTHORIZATION="Bearer plt_agent"
    )
    assert answer.status_code == 401 and not Enrollment.objects.exists()
