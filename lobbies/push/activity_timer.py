"""The dispatcher's activity pass: what watched agents are doing, told to their watchers.

Run from lobbies.push.timers.tick, in the one process whose timers run. Nothing is read unless
some agent watches (`watch_agents`): then, at most once a second (and at once after a turn
edge woke the dispatcher), each watched lobby's agents are read through the one precedence
(lobbies.activity), a change from what was last announced is owed to every watcher of that
agent but the agent itself, and owed changes are pushed as receipts are: at most one event
per receipt spacing (30 s) per watcher, at most receipts_per_event (20) agents in one, the
newest state of each, never a message body.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from lobbies.activity import activity_of, working_after
from lobbies.agent_selectors import activity_facts, with_last_message_at
from lobbies.models import ActivityChange, Agent, AgentActivity
from lobbies.push.presence import live_connections
from lobbies.wire.facts import iso

Push = tuple[int, dict[str, Any]]  # (watcher's pk, the group message for it)

READ_EVERY = timedelta(seconds=1)
CHANGE_LIFETIME = timedelta(days=1)
_last_read: dict[str, datetime] = {}


def _watches(watching: list[str] | None, agent_id: str) -> bool:
    return watching is not None and (watching == [] or agent_id in watching)


def note_changes(now: datetime, lobby_id: int | None = None) -> None:
    """Compare each watched lobby's agents (or only `lobby_id`'s) with what was last
    announced; owe the changes."""
    watching_rows = AgentActivity.objects.filter(watching__isnull=False, agent__enabled=True)
    if lobby_id is not None:
        watching_rows = watching_rows.filter(agent__lobby_id=lobby_id)
    watchers = list(
        watching_rows.values_list("agent_id", "agent__agent_id", "agent__lobby_id", "watching")
    )
    by_lobby: dict[int, list[tuple[int, str, list[str] | None]]] = defaultdict(list)
    for pk, name, lobby_id, watching in watchers:
        by_lobby[lobby_id].append((pk, name, watching))
    for lobby_id, watching_here in by_lobby.items():
        agents = list(with_last_message_at(Agent.objects.filter(lobby_id=lobby_id, enabled=True)))
        announced = dict(
            AgentActivity.objects.filter(agent__in=agents).values_list("agent_id", "announced")
        )
        for agent in agents:
            state = activity_of(activity_facts(agent), now, working_after())
            before = announced.get(agent.pk)
            if before == state.activity.value:
                continue
            with transaction.atomic():
                if before is None:
                    AgentActivity.objects.get_or_create(agent=agent)
                    before = ""
                changed = AgentActivity.objects.filter(agent=agent, announced=before).update(
                    announced=state.activity.value, announced_since=state.since
                )
                if not changed or before == "":
                    continue  # first seen: nothing to announce; list_agents has the present
                ActivityChange.objects.bulk_create(
                    ActivityChange(
                        watcher_id=pk,
                        agent_id=agent.agent_id,
                        activity=state.activity.value,
                        since=state.since,
                        created_at=now,
                    )
                    for pk, name, watching in watching_here
                    if name != agent.agent_id and _watches(watching, agent.agent_id)
                )


def push_changes(now: datetime) -> list[Push]:
    """Owed changes to connected watchers, coalesced like read receipts."""
    bounds = settings.BOUNDS
    if ActivityChange.objects.filter(created_at__lt=now - CHANGE_LIFETIME).exists():
        ActivityChange.objects.filter(created_at__lt=now - CHANGE_LIFETIME).delete()
    watchers = list(
        ActivityChange.objects.filter(pushed_at__isnull=True)
        .values_list("watcher_id", flat=True)
        .distinct()[:200]
    )
    pushes: list[Push] = []
    if not watchers:
        return pushes
    spacing = now - timedelta(seconds=bounds.receipt_spacing_seconds)
    connected = set(
        live_connections().filter(agent_id__in=watchers).values_list("agent_id", flat=True)
    )
    for watcher_pk in watchers:
        if watcher_pk not in connected:
            continue
        with transaction.atomic():
            row = AgentActivity.objects.select_for_update().filter(agent_id=watcher_pk).first()
            if row is None:
                continue
            if row.last_activity_push_at and spacing < row.last_activity_push_at <= now:
                continue
            owed = list(
                ActivityChange.objects.filter(watcher_id=watcher_pk, pushed_at__isnull=True)
                .order_by("created_at", "pk")
                .values_list("pk", "agent_id", "activity", "since")
            )
            newest: dict[str, tuple[str, datetime | None]] = {}
            for _, agent_id, activity, since in owed:
                newest.pop(agent_id, None)  # re-inserted: ordered by its latest change
                newest[agent_id] = (activity, since)
            told = list(newest.items())[-bounds.receipts_per_event :]
            names = {agent_id for agent_id, _ in told}
            ActivityChange.objects.filter(
                pk__in=[pk for pk, agent_id, _, _ in owed if agent_id in names]
            ).update(pushed_at=now)
            row.last_activity_push_at = now
            row.save(update_fields=["last_activity_push_at"])
            changes = [
                {"agent_id": agent_id, "activity": activity, "since": iso(since)}
                for agent_id, (activity, since) in told
            ]
            pushes.append((watcher_pk, {"type": "agent.activity", "changes": changes}))
    return pushes


def run_activity(now: datetime) -> list[Push]:
    """1. No watcher anywhere: done (one indexed read). 2. Note changes, at most once a
    second. 3. Answer the pushes owed, published after the tick's transactions."""
    if not AgentActivity.objects.filter(watching__isnull=False).exists():
        return []
    last = _last_read.get("at")
    if last is None or now - last >= READ_EVERY or now < last:
        _last_read["at"] = now
        note_changes(now)
    return push_changes(now)
