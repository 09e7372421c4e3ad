"""Migration lobbies.0011: an agent that was already called `owner` is renamed, with the
messages it sent, so from then on only the owner's reserved row carries the name."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("lobbies", "0010_runtime_facts_and_permissions_audit")]
AFTER = [("lobbies", "0011_owner_sender")]


@pytest.mark.django_db(transaction=True)
def test_an_agent_named_owner_is_renamed_with_its_messages():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    now = timezone.now()
    lobby = old.get_model("lobbies", "Lobby").objects.create(name="legacy", created_at=now)
    Agent = old.get_model("lobbies", "Agent")
    owner = Agent.objects.create(lobby=lobby, agent_id="owner", created_at=now)
    Agent.objects.create(lobby=lobby, agent_id="owner-agent", created_at=now)
    old.get_model("lobbies", "Message").objects.create(
        lobby=lobby,
        sequence=1,
        sender=owner,
        sender_name="owner",
        scope="direct",
        priority="info",
        content="hi",
        content_bytes=2,
        client_request_id="r-1",
        request_hash="x",
        created_at=now,
    )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    renamed = new.get_model("lobbies", "Agent").objects.get(pk=owner.pk)
    assert renamed.agent_id == "owner-agent-2"
    message = new.get_model("lobbies", "Message").objects.get(sender_id=owner.pk)
    assert message.sender_name == "owner-agent-2"
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
