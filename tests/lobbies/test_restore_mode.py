"""Restore mode in the store: closed to agents, timers paused, reopened with uncertain work."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from lobbies.access.secret_files import admin_token
from lobbies.access.tokens import hash_token
from lobbies.actions import enrollment, restore, restore_commands
from lobbies.errors import BrokerError
from lobbies.models import Agent, AuditEvent, Credential, Delivery, RetiredRuntime
from lobbies.push import timers


@pytest.fixture(autouse=True)
def _fresh_reading():
    """Each test reads restore mode from its own store (the reading is per process)."""
    restore.forget_reading()
    yield
    restore.forget_reading()


def bind(agent: Agent, runtime: str) -> None:
    Agent.objects.filter(pk=agent.pk).update(runtime_id=runtime, runtime_generation=3)


def test_entering_restore_mode_replaces_every_token_and_retires_every_binding(lead, backend):
    runtime = "0f0e0d0c-0b0a-4909-8807-060504030201"
    bind(backend.agent, runtime)
    before = restore.broker_state().incarnation

    replacements = restore_commands.enter_restore_mode("/backups/b1", None)

    assert sorted((r.lobby, r.agent) for r in replacements) == [
        ("my-team", "backend"),
        ("my-team", "lead"),
    ]
    assert restore.broker_state().incarnation != before
    assert (
        not Credential.objects.filter(revoked_at__isnull=True)
        .exclude(token_hash__in=[hash_token(r.token) for r in replacements])
        .exists()
    )
    row = Agent.objects.get(pk=backend.agent.pk)
    assert (row.runtime_id, row.runtime_generation) == (None, 4)
    assert RetiredRuntime.objects.filter(agent=row, runtime_id=runtime).exists()
    status, body = backend.call("list_agents")
    assert (status, body["error"]["code"]) == (401, "token_revoked")
    new_token = next(r.token for r in replacements if r.agent == "backend")
    response = Client().get("/v1/agents", HTTP_AUTHORIZATION=f"Bearer {new_token}")
    assert (response.status_code, response.json()["error"]["code"]) == (503, "restore_mode")
    audit = AuditEvent.objects.get(action="restore_started")
    assert audit.detail["new_tokens"] == 2 and audit.detail["restored_from"] == "/backups/b1"


def test_timers_wait_for_finish_then_catch_up_and_pending_work_is_uncertain(lead, backend):
    later = (timezone.now() + timedelta(minutes=5)).isoformat()
    waiting = lead.send("backend", "already pending", "r-1")["message_id"]
    scheduled = lead.send("backend", "later", "r-2", deliver_at=later)["message_id"]
    replacements = restore_commands.enter_restore_mode("/backups/b2", timezone.now())

    timers.tick(timezone.now() + timedelta(minutes=10))
    assert Delivery.objects.get(message_id=scheduled).state == "held"

    answer = restore_commands.finish_restore()

    # finish_restore let the overdue timer catch up only at "now"; the scheduled one is not
    # due yet, so only the pending copy is uncertain.
    assert answer["uncertain"] == 1
    assert restore.uncertain_message_ids(backend.agent.pk) == [waiting]
    token = next(r.token for r in replacements if r.agent == "backend")
    response = Client().post(
        "/v1/tools/get_context",
        data="{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.json()
    restored = response.json()["restored"]
    assert restored["uncertain_message_ids"] == [waiting]
    assert response.json()["broker"]["incarnation"] == answer["incarnation"]
    assert AuditEvent.objects.filter(action="restore_finished").count() == 1


def test_finish_outside_restore_mode_is_a_conflict(db):
    client = Client()
    response = client.post(
        "/v1/admin/restore/finish", HTTP_AUTHORIZATION=f"Bearer {admin_token(settings.DATA_DIR)}"
    )
    assert (response.status_code, response.json()["error"]["code"]) == (
        409,
        "not_in_restore_mode",
    )


@pytest.mark.django_db
def test_health_answers_get_and_head_and_refuses_other_methods_with_405():
    """Found by schemathesis: TRACE /v1/health answered 200 as if it were a GET, and QUERY
    got Django's CSRF page (HTML) instead of JSON."""
    client = Client(enforce_csrf_checks=True)
    assert client.get("/v1/health").status_code == 200
    assert client.head("/v1/health").status_code == 200
    for method in ("POST", "DELETE", "TRACE", "QUERY"):
        response = client.generic(method, "/v1/health")
        assert response.status_code == 405, method
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert response["Allow"] == "GET, HEAD"


def test_health_reads_the_store_and_names_restore_mode(lead):
    assert Client().get("/v1/health").json()["restore_mode"] is False
    restore_commands.enter_restore_mode("/backups/b3", None)
    answer = Client().get("/v1/health")
    assert answer.status_code == 200
    assert answer.json()["restore_mode"] is True
    assert answer.json()["incarnation"] == str(restore.broker_state().incarnation)


def test_a_backups_unredeemed_enrolment_codes_do_not_survive_the_restore(lead, backend):
    issued = enrollment.enroll_agent("my-team", "backend")
    restore_commands.enter_restore_mode("/backups/b1", None)
    restore_commands.finish_restore()
    with pytest.raises(BrokerError) as refused:
        enrollment.redeem_enrollment(issued.code, "127.0.0.1")
    assert refused.value.code == "unknown_code"
