"""The Activity page: the lobby's audit events as plain sentences, newest first, fifty a page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from lobbies.actions import operator, restore_commands
from lobbies.actions.runtime import RuntimeConflict, claim_runtime, wait_for_hand_over
from lobbies.models import ActorKind, Agent, AuditEvent
from lobbies.push.presence import WAITING_CONFIRMED
from tests.console.test_local_operator import operator_browser


def test_events_read_as_sentences_with_the_accounts_email(lobby, lead):
    lead.ok("create_room", room_id="ops", members=["lead"])
    AuditEvent.objects.create(
        actor_kind="account",
        account="alice@example.com",
        lobby_name="my-team",
        action="room_archived",
        target="design",
        created_at=timezone.now() + timedelta(seconds=5),
    )
    page = operator_browser().get("/my-team/activity").content.decode()
    assert "alice@example.com archived room design" in page
    assert "The operator added agent lead" in page
    assert "Agent lead created room ops" in page
    assert page.index("alice@example.com archived") < page.index("Agent lead created room ops")


def test_activity_is_paginated_by_fifty_and_escaped(lobby):
    now = timezone.now()
    AuditEvent.objects.bulk_create(
        AuditEvent(
            actor_kind="account",
            account="<b>x</b>@example.com",
            lobby_name="my-team",
            action="viewer_added",
            target=f"v{n}@example.com",
            created_at=now + timedelta(seconds=n),
        )
        for n in range(60)
    )
    client = operator_browser()
    first = client.get("/my-team/activity").content.decode()
    assert first.count("added viewer") == 50 and "v59@example.com" in first
    assert "<b>x</b>" not in first and "&lt;b&gt;" in first
    second = client.get("/my-team/activity?page=2").content.decode()
    assert "v0@example.com" in second and "v59@example.com" not in second


def test_the_old_address_under_settings_redirects_to_the_activity_page(lobby):
    answer = operator_browser().get("/my-team/settings/activity?page=2")
    assert answer.status_code == 301
    assert answer["Location"] == "/my-team/activity?page=2"
    page = operator_browser().get("/my-team/").content.decode()
    assert 'href="/my-team/activity"' in page


def test_every_lobby_shows_the_brokers_restores(lobby):
    AuditEvent.objects.create(
        actor_kind="operator",
        action="restore_started",
        target="incarnation",
        detail={
            "restored_from": "/backups/b1",
            "backup_taken_at": "2026-12-01T03:15:00Z",
            "new_tokens": 2,
        },
        created_at=timezone.now(),
    )
    AuditEvent.objects.create(
        actor_kind="operator",
        action="restore_finished",
        target="incarnation",
        created_at=timezone.now() + timedelta(seconds=1),
    )
    page = operator_browser().get("/my-team/activity").content.decode()
    assert "The operator restored the broker from /backups/b1" in page
    assert "The operator finished the restore: agents are admitted again" in page


def test_the_restore_actions_write_their_events_and_every_lobby_shows_them(lobby, lead):
    restore_commands.enter_restore_mode("/backups/<b>b7</b>", timezone.now() - timedelta(hours=2))
    restore_commands.finish_restore()
    page = operator_browser().get("/my-team/activity").content.decode()
    assert "The operator restored the broker from /backups/&lt;b&gt;b7&lt;/b&gt;" in page
    assert "agents need the new tokens (1 issued)" in page
    assert "The operator finished the restore: agents are admitted again" in page
    assert "<b>b7</b>" not in page
    assert page.index("finished the restore") < page.index("restored the broker from")


def _ask(agent: Agent, runtime: str) -> None:
    """A new conversation's bridge asks for the agent another conversation holds."""
    with pytest.raises(RuntimeConflict) as refused:
        claim_runtime(agent, runtime, None)
    wait_for_hand_over(refused.value)


def test_a_conversation_that_waited_and_the_owners_hand_over_are_on_the_page(lobby, backend):
    holder, waiting = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    claim_runtime(backend.agent, holder, None)
    Agent.objects.filter(pk=backend.agent.pk).update(runtime_first_ready_at=timezone.now())
    _ask(backend.agent, waiting)
    Agent.objects.filter(pk=backend.agent.pk).update(
        waiting_since=timezone.now() - WAITING_CONFIRMED - timedelta(seconds=1)
    )
    _ask(backend.agent, waiting)
    operator.hand_over(
        "my-team", "backend", actor_kind=ActorKind.ACCOUNT, account="<i>boss</i>@example.com"
    )
    page = operator_browser().get("/my-team/activity").content.decode()
    assert (
        "Agent backend started a new conversation (runtime 22222222) that waits to take over "
        "from runtime 11111111; the owner can hand it over" in page
    )
    assert (
        "&lt;i&gt;boss&lt;/i&gt;@example.com handed agent backend over to the conversation "
        "waiting for it" in page
    )
    assert "<i>boss</i>" not in page
    assert page.index("handed agent backend over") < page.index("waits to take over")
