"""The team manifest's plan and its apply (lobbies/actions/team.py): all or nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.conf import settings
from django.test import override_settings

from lobbies.actions import operator, rooms
from lobbies.actions.team import apply_team, plan_team
from lobbies.api.schemas import TeamManifest
from lobbies.errors import BrokerError
from lobbies.models import Agent, AuditEvent, Room

pytestmark = pytest.mark.django_db


def manifest(**rooms_members: list[str]) -> TeamManifest:
    return TeamManifest.model_validate(
        {
            "lobby": "crew",
            "agents": {"lead": {"permissions": ["broadcast"]}, "backend": {}},
            "rooms": {room: {"members": members} for room, members in rooms_members.items()},
        }
    )


def test_a_change_the_store_refuses_midway_leaves_nothing_changed():
    """The room limit is the action's to enforce: by then the agents were added, and are not."""
    operator.create_lobby("crew")
    operator.add_agent("crew", "old")
    rooms.create_room(operator.operator_changer("crew"), "first", ["old"])
    audited = AuditEvent.objects.count()
    bounds = replace(settings.BOUNDS, lobby_rooms=1)
    with override_settings(BOUNDS=bounds), pytest.raises(BrokerError) as refused:
        apply_team(manifest(first=["old"], second=["lead"]))
    assert refused.value.code == "too_many_rooms"
    assert sorted(Agent.objects.values_list("agent_id", flat=True)) == ["old"]
    assert list(Room.objects.values_list("room_id", flat=True)) == ["first"]
    assert AuditEvent.objects.count() == audited


def test_the_dry_run_answers_the_plan_the_apply_runs():
    team = manifest(design=["lead", "backend"])
    planned = apply_team(team, dry_run=True)
    assert not Agent.objects.exists() and planned["enrollments"] == []
    applied = apply_team(team)
    assert applied["changes"] == planned["changes"]
    assert [e["agent"] for e in applied["enrollments"]] == ["lead", "backend"]
    assert plan_team(team).steps == []
