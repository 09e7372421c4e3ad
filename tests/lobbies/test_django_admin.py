"""The operator browses the store in the Django admin (read-only, never a token) and runs the
agent operations as admin actions, through the same actions as the CLI and the admin API."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from lobbies.actions import operator, owner_messages
from lobbies.models import (
    ActorKind,
    Agent,
    AuditEvent,
    Delivery,
    DeliveryState,
    Message,
    RetiredRuntime,
)
from tests.conftest import AgentClient


@pytest.fixture
def operator_browser(db) -> Client:
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw-unused")
    client = Client(HTTP_HOST="127.0.0.1:8787", secure=True)
    client.force_login(user)
    return client


@pytest.mark.parametrize("store_page", ["lobby", "agent", "message", "delivery", "auditevent"])
def test_every_store_page_lists_without_tokens(operator_browser, lead, backend, store_page):
    lead.send("backend", "Review <b>this</b>", "r-1")
    response = operator_browser.get(f"/admin/lobbies/{store_page}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert lead.token not in body and backend.token not in body


def test_a_message_page_shows_its_deliveries_read_only_and_escaped(operator_browser, lead, backend):
    sent = lead.send("backend", "Review <script>alert(1)</script>", "r-1")
    response = operator_browser.get(f"/admin/lobbies/message/{sent['message_id']}/change/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;" in body
    assert "backend" in body and 'name="_save"' not in body


def test_nothing_accepted_can_be_added_or_deleted_in_the_admin(operator_browser, lead, backend):
    sent = lead.send("backend", "m", "r-1")
    assert operator_browser.get("/admin/lobbies/message/add/").status_code == 403
    delete = operator_browser.post(
        f"/admin/lobbies/message/{sent['message_id']}/delete/", {"post": "yes"}
    )
    assert delete.status_code == 403


def test_the_admin_needs_a_signed_in_staff_user(db):
    response = Client(HTTP_HOST="127.0.0.1:8787").get("/admin/lobbies/message/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


# ---------------------------------------------------------------- agent actions

AGENTS = "/admin/lobbies/agent/"


def act(client: Client, action: str, *agents: Any, **fields: str) -> Any:
    """Post an admin action on the agents' changelist, as the action menu does."""
    data = {"action": action, "_selected_action": [str(a.pk) for a in agents], **fields}
    return client.post(AGENTS, data)


def shown_messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def audited(action: str, agent_id: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, agent_id=agent_id))


def test_disable_asks_first_then_holds_the_inbox_and_is_audited_as_the_admin_user(
    operator_browser, lead, backend
):
    lead.send("backend", "Review this", "r-1")
    page = act(operator_browser, "disable", backend.agent)
    assert page.status_code == 200 and "Disable these agents?" in page.content.decode()
    assert Agent.objects.get(pk=backend.agent.pk).enabled

    done = act(operator_browser, "disable", backend.agent, post="yes")
    assert done.status_code == 302
    assert not Agent.objects.get(pk=backend.agent.pk).enabled
    assert Delivery.objects.get(recipient=backend.agent).state == DeliveryState.HELD
    [event] = audited("agent_disabled", "backend")
    assert event.account == "admin:operator" and event.detail == {"held": 1}


def test_the_admin_and_the_admin_api_disable_with_the_same_outcome(
    operator_browser, lead, backend, make_agent
):
    make_agent("twin")
    lead.send("backend", "one", "r-1")
    lead.send("twin", "one", "r-2")
    act(operator_browser, "disable", backend.agent, post="yes")
    api = Client().post(
        "/v1/admin/lobbies/my-team/agents/twin/disable",
        HTTP_AUTHORIZATION="Bearer pla_test-admin-token",
    )
    assert api.status_code == 200
    [by_admin], [by_api] = audited("agent_disabled", "backend"), audited("agent_disabled", "twin")
    assert by_admin.detail == by_api.detail and by_api.account == ""
    states = {d.recipient.agent_id: (d.state, d.held_reason) for d in Delivery.objects.all()}
    assert states["backend"] == states["twin"] == (DeliveryState.HELD, "recipient_disabled")


def test_enabling_twice_says_so_and_changes_nothing(operator_browser, backend):
    operator.disable_agent("my-team", "backend")
    first = act(operator_browser, "enable", backend.agent)
    assert Agent.objects.get(pk=backend.agent.pk).enabled
    assert any("enabled: backend in my-team" in m for m in shown_messages(first))
    second = act(operator_browser, "enable", backend.agent)
    assert any("already enabled" in m for m in shown_messages(second))
    assert [e.account for e in audited("agent_enabled", "backend")] == ["admin:operator"]


def test_an_agent_removed_meanwhile_is_reported_and_nothing_happens(operator_browser, backend):
    operator.remove_agent("my-team", "backend")
    done = act(operator_browser, "disable", backend.agent, post="yes")
    assert done.status_code == 302
    assert not audited("agent_disabled", "backend")


def test_reset_runtime_retires_the_bound_runtime(operator_browser, backend):
    Agent.objects.filter(pk=backend.agent.pk).update(runtime_id="run-1")
    assert (
        "Reset the runtime"
        in act(operator_browser, "reset_runtime", backend.agent).content.decode()
    )
    act(operator_browser, "reset_runtime", backend.agent, post="yes")
    assert Agent.objects.get(pk=backend.agent.pk).runtime_id is None
    assert RetiredRuntime.objects.filter(agent=backend.agent, runtime_id="run-1").exists()
    [event] = audited("runtime_reset", "backend")
    assert event.account == "admin:operator"


def test_hand_over_gives_the_agent_to_the_conversation_waiting_and_says_who_had_none(
    operator_browser, lead, backend
):
    """Issue 43: the admin's hand-over goes through the same action as the CLI's."""
    now = timezone.now()
    Agent.objects.filter(pk=backend.agent.pk).update(
        runtime_id="run-1",
        waiting_runtime_id="run-2",
        waiting_since=now - timedelta(seconds=30),
        waiting_seen_at=now,
    )
    Agent.objects.filter(pk=lead.agent.pk).update(runtime_id="run-lead")
    page = act(operator_browser, "hand_over", backend.agent, lead.agent)
    assert "Hand these agents over" in page.content.decode()
    assert Agent.objects.get(pk=backend.agent.pk).runtime_id == "run-1"  # asked first

    done = act(operator_browser, "hand_over", backend.agent, lead.agent, post="yes")
    said = shown_messages(done)
    assert any(m.startswith("handed over: backend in ") for m in said), said
    assert any(
        m.startswith("not handed over, lead in ") and "no new conversation is waiting" in m
        for m in said
    ), said
    handed = Agent.objects.get(pk=backend.agent.pk)
    assert (handed.runtime_id, handed.waiting_runtime_id) == ("run-2", None)
    assert RetiredRuntime.objects.filter(agent=backend.agent, runtime_id="run-1").exists()
    assert Agent.objects.get(pk=lead.agent.pk).runtime_id == "run-lead"
    [event] = audited("runtime_handed_over", "backend")
    assert event.account == "admin:operator"


def test_rotate_downloads_the_new_configuration_once_and_never_logs_it(
    operator_browser, backend, caplog
):
    page = act(operator_browser, "rotate", backend.agent)
    assert "never shown again" in page.content.decode()
    with caplog.at_level(logging.DEBUG):
        download = act(operator_browser, "rotate", backend.agent, post="yes")
    assert download["Content-Disposition"].startswith("attachment;")
    assert "no-store" in download["Cache-Control"]
    config = json.loads(download.content)
    assert config["lobby"] == "my-team" and config["agent"] == "backend"
    assert config["url"] == "http://127.0.0.1:8787"
    token = config["token"]
    assert token not in caplog.text
    assert not any(token in json.dumps(e.detail) for e in AuditEvent.objects.all())
    assert AgentClient(backend.agent, token, Client()).call("get_context")[0] == 200
    assert backend.call("get_context")[0] == 401
    # A lost download: rotating again works, and is audited again.
    again = json.loads(act(operator_browser, "rotate", backend.agent, post="yes").content)
    assert again["token"] != token
    assert [e.account for e in audited("credential_rotated", "backend")] == ["admin:operator"] * 2


def test_rotate_takes_one_agent_at_a_time(operator_browser, lead, backend):
    answer = act(operator_browser, "rotate", lead.agent, backend.agent, post="yes")
    assert answer.status_code == 302
    assert any("one agent at a time" in m for m in shown_messages(answer))
    assert not audited("credential_rotated", "backend")


def test_rest_several_then_resume_one(operator_browser, lead, backend):
    act(operator_browser, "rest", lead.agent, backend.agent, post="yes")
    assert set(Agent.objects.filter(resting=True).values_list("agent_id", flat=True)) == {
        "lead",
        "backend",
    }
    rested = AuditEvent.objects.filter(action="agents_rested", actor_kind="operator")
    assert sorted(e.target for e in rested) == ["backend", "lead"]
    assert {e.account for e in rested} == {"admin:operator"}
    again = act(operator_browser, "rest", backend.agent, post="yes")
    assert any("already resting" in m for m in shown_messages(again))
    act(operator_browser, "resume", backend.agent)
    assert not Agent.objects.get(pk=backend.agent.pk).resting
    assert Agent.objects.get(pk=lead.agent.pk).resting


def test_retry_notifications_clears_attention_and_is_due_now(operator_browser, backend):
    Agent.objects.filter(pk=backend.agent.pk).update(
        notification_attention_required=True, notify_attempts=5
    )
    act(operator_browser, "retry_notifications", backend.agent)
    agent = Agent.objects.get(pk=backend.agent.pk)
    assert not agent.notification_attention_required and agent.notify_attempts == 0
    assert agent.notify_next_at is not None
    [event] = audited("notifications_retried", "backend")
    assert event.detail == {"attention_was_required": True}


def test_set_permissions_grants_what_was_asked_and_keeps_the_rest(operator_browser, lead):
    form = act(operator_browser, "set_permissions", lead.agent)
    assert 'name="broadcast"' in form.content.decode()
    act(
        operator_browser,
        "set_permissions",
        lead.agent,
        post="yes",
        broadcast="grant",
        manage_rooms="keep",
    )
    agent = Agent.objects.get(pk=lead.agent.pk)
    assert agent.broadcast and agent.manage_rooms
    [event] = audited("permissions_changed", "lead")
    assert event.detail == {"broadcast": True, "manage_rooms": True}


def test_set_permissions_with_a_bogus_choice_shows_the_form_again(operator_browser, lead):
    answer = act(
        operator_browser,
        "set_permissions",
        lead.agent,
        post="yes",
        broadcast="all",
        manage_rooms="",
    )
    assert answer.status_code == 200 and "errorlist" in answer.content.decode()
    assert not Agent.objects.get(pk=lead.agent.pk).broadcast


def test_set_role_from_text(operator_browser, backend):
    act(operator_browser, "set_role", backend.agent, post="yes", role="Own the <API>.\n")
    assert Agent.objects.get(pk=backend.agent.pk).role == "Own the <API>.\n"
    [event] = audited("role_set", "backend")
    assert event.account == "admin:operator"
    refused = act(operator_browser, "set_role", backend.agent, post="yes", role="a\x00b")
    assert refused.status_code == 200
    assert Agent.objects.get(pk=backend.agent.pk).role == "Own the <API>.\n"


@pytest.mark.parametrize(
    "data",
    [
        {"action": "disable", "_selected_action": ["abc"], "post": "yes"},
        {"action": "no_such_action", "_selected_action": ["1"]},
        {"action": "rotate", "_selected_action": ["99999"], "post": "yes"},
        {"action": "set_role", "index": "x", "_selected_action": ["1"]},
    ],
)
def test_odd_action_posts_never_fail_the_admin(operator_browser, backend, data):
    assert operator_browser.post(AGENTS, data).status_code < 500


@pytest.mark.parametrize(
    "query",
    [
        "message/?delivery_state=bogus",
        "message/?created_at__year=abc",
        "message/?lobby__id__exact=abc",
        "message/?q=%3Cscript%3E",
        "message/?priority__exact=%00",
        "auditevent/?created_at__month=13&created_at__year=2026",
        "agent/?o=99",
    ],
)
def test_odd_list_queries_never_fail_the_admin(operator_browser, lead, backend, query):
    lead.send("backend", "m", "r-1")
    assert operator_browser.get(f"/admin/lobbies/{query}").status_code < 500


# ---------------------------------------------------------------- messages and audit


def test_the_message_list_shows_content_folded_and_escaped_with_recipient_states(
    operator_browser, lead, backend, make_agent
):
    make_agent("qa")
    lead.send("backend", "Line one\n\n<script>alert(1)</script>   " + "x" * 300, "r-1")
    lead.send("qa", "For qa", "r-2")
    backend.ok("acknowledge_messages", message_ids=[Message.objects.order_by("id").first().id])
    body = operator_browser.get("/admin/lobbies/message/").content.decode()
    assert "Line one &lt;script&gt;alert(1)&lt;/script&gt; xxx" in body
    assert "<script>alert(1)" not in body and "x" * 300 not in body
    assert "backend: seen" in body and "qa: pending" in body


def test_messages_are_searched_by_content_and_filtered_by_delivery_state(
    operator_browser, lead, backend
):
    lead.send("backend", "about the parser", "r-1")
    lead.send("backend", "about the lexer", "r-2")
    found = operator_browser.get("/admin/lobbies/message/?q=parser").content.decode()
    assert "about the parser" in found and "about the lexer" not in found
    assert (
        "about the lexer"
        in operator_browser.get("/admin/lobbies/message/?delivery_state=pending").content.decode()
    )
    assert (
        "about the lexer"
        not in operator_browser.get("/admin/lobbies/message/?delivery_state=seen").content.decode()
    )


def test_the_audit_list_searches_targets_and_filters_by_actor(operator_browser, backend):
    act(operator_browser, "retry_notifications", backend.agent)
    page = operator_browser.get(
        "/admin/lobbies/auditevent/?q=backend&account=admin%3Aoperator&action__exact=notifications_retried"
    )
    body = page.content.decode()
    assert page.status_code == 200 and "notifications_retried" in body
    assert page.context["cl"].result_count == 1
    assert (
        operator_browser.get("/admin/lobbies/auditevent/?q=nobody").context["cl"].result_count == 0
    )


def test_what_an_agent_wrote_about_itself_is_escaped_in_the_agent_list(operator_browser, backend):
    backend.ok("set_status", status="<img src=x onerror=alert(1)>")
    body = operator_browser.get(AGENTS).content.decode()
    assert "<img src=x" not in body and "&lt;img src=x" in body


def test_the_agents_list_leaves_out_the_owners_reserved_row(operator_browser, lead, backend):
    lobby = Agent.objects.get(pk=backend.agent.pk).lobby
    owner_messages.send_owner_message(
        lobby,
        to="backend",
        content="hello from the owner",
        important=False,
        client_request_id="o-1",
        actor_kind=ActorKind.OPERATOR,
    )
    assert Agent.objects.filter(lobby=lobby, agent_id="owner").exists()
    listed = operator_browser.get(AGENTS)
    assert listed.status_code == 200
    rows = listed.context["cl"].result_list
    assert sorted(a.agent_id for a in rows) == ["backend", "lead"]
