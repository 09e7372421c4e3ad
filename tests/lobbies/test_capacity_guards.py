"""Capacity guards refuse a send before anything is stored, naming their setting."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.conf import settings
from django.test import override_settings

from lobbies.models import Delivery, Message


def refused(agent, tool: str, **arguments) -> dict:
    before = (Message.objects.count(), Delivery.objects.count())
    status, body = agent.call(tool, **arguments)
    assert (Message.objects.count(), Delivery.objects.count()) == before
    return {"status": status, **body["error"]}


def test_a_broadcast_over_the_fanout_cap_is_refused(make_agent):
    lead = make_agent("lead", broadcast=True)
    for name in ("a", "b", "c"):
        make_agent(name)
    with override_settings(BOUNDS=replace(settings.BOUNDS, broadcast_fanout=2)):
        error = refused(lead, "broadcast", content="all", client_request_id="f-1")
    assert (error["status"], error["code"]) == (413, "fanout_too_large")
    assert "POCOLOBBY_BROADCAST_FANOUT" in error["message"]
    with override_settings(BOUNDS=replace(settings.BOUNDS, broadcast_fanout=3)):
        assert lead.call("broadcast", content="all", client_request_id="f-1")[0] == 200


@pytest.mark.skipif(
    "sqlite" not in settings.DATABASES["default"]["ENGINE"],
    reason="the reserve guards the embedded store's volume; a database server guards its own",
)
def test_a_send_under_the_free_disk_reserve_is_refused_507(lead, backend):
    lead.send("backend", "before", "d-0")
    with override_settings(BOUNDS=replace(settings.BOUNDS, disk_reserve_bytes=10**18)):
        error = refused(lead, "send_message", to="backend", content="x", client_request_id="d-1")
    assert (error["status"], error["code"]) == (507, "storage_capacity")
    assert "POCOLOBBY_DISK_RESERVE_BYTES" in error["message"]
    assert Message.objects.filter(content="before").exists()  # accepted work is kept


def test_a_lobby_at_its_stored_message_cap_refuses_new_sends(lead, backend):
    with override_settings(BOUNDS=replace(settings.BOUNDS, lobby_messages=2)):
        lead.send("backend", "one", "c-1")
        backend.send("lead", "two", "c-2")
        error = refused(lead, "send_message", to="backend", content="3", client_request_id="c-3")
    assert (error["status"], error["code"]) == (507, "lobby_capacity")
    assert "POCOLOBBY_LOBBY_MESSAGES" in error["message"]
