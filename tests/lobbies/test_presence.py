"""Sockets recorded in batches; the process row read, not rewritten, while it is fresh."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from lobbies.models import BrokerProcess, Connection
from lobbies.push import presence

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_of_sockets_gets_one_row_each_in_order(lead, backend):
    pks = presence.open_connections([(lead.agent.pk, 3), (backend.agent.pk, 1), (lead.agent.pk, 4)])
    rows = [Connection.objects.get(pk=pk) for pk in pks]
    assert [(r.agent_id, r.generation) for r in rows] == [
        (lead.agent.pk, 3),
        (backend.agent.pk, 1),
        (lead.agent.pk, 4),
    ]
    assert all(r.process_id == presence.PROCESS_ID for r in rows)
    assert set(presence.live_connections().values_list("pk", flat=True)) >= set(pks)


def test_a_fresh_process_row_is_not_rewritten_and_a_stale_one_is(lead):
    presence.ensure_process()
    seen = BrokerProcess.objects.get(id=presence.PROCESS_ID).last_seen_at
    presence.open_connection(lead.agent.pk, 1)
    assert BrokerProcess.objects.get(id=presence.PROCESS_ID).last_seen_at == seen
    stale = timezone.now() - presence.PROCESS_STALE_AFTER - timedelta(seconds=1)
    BrokerProcess.objects.filter(id=presence.PROCESS_ID).update(last_seen_at=stale)
    presence.open_connection(lead.agent.pk, 2)
    assert BrokerProcess.objects.get(id=presence.PROCESS_ID).last_seen_at > stale
    BrokerProcess.objects.filter(id=presence.PROCESS_ID).delete()  # forgotten as dead
    pk = presence.open_connection(lead.agent.pk, 3)
    assert pk in presence.live_connections().values_list("pk", flat=True)
