"""Writes about what agents are doing: turn edges (from Claude Code's hooks or a bridge that
watches its pane), `pocolobby msg` presence, and a coordinator's `watch_agents`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from django.db import transaction
from django.utils import timezone

from lobbies.actions.rooms import _admitted
from lobbies.actions.runtime import RuntimeCaller, fence
from lobbies.models import Agent, AgentActivity, Host
from lobbies.push.activity_timer import note_changes
from lobbies.push.events import wake_dispatcher_on_commit

# A msg call refreshes the agent's presence at most this often: one write per 30 s, not per call.
MSG_SEEN_EVERY = timedelta(seconds=30)


def _watched_in(lobby_id: int) -> bool:
    return AgentActivity.objects.filter(agent__lobby_id=lobby_id, watching__isnull=False).exists()


def record_turn(
    agent: Agent, event: Literal["start", "end"], at: datetime, host: str | None = None
) -> AgentActivity:
    """The agent's current turn, inside the caller's transaction (board.actions.record_turn
    writes the stretch beside it). An end never moves before its start."""
    row, _ = AgentActivity.objects.select_for_update().get_or_create(agent=agent)
    if event == "start":
        row.turn_started_at, row.turn_ended_at = at, None
    else:
        started = row.turn_started_at
        row.turn_ended_at = max(at, started) if started is not None else at
    if host:
        row.host = host
    row.save(update_fields=["turn_started_at", "turn_ended_at", "host"])
    if _watched_in(agent.lobby_id):
        wake_dispatcher_on_commit()  # the activity timer tells the watchers now, not at its tick
    return row


# agent pk -> the msg presence this process last stored or read, so a burst of msg calls (a
# send each) reads nothing more: one ORM read per send cost a third of a send's CPU
# (docs/PERFORMANCE.md, "Figures from code comments"). Another process reads the store once,
# then keeps its own.
_known: dict[int, datetime] = {}


def forget_msg_presence() -> None:
    """Drop this process's memory of msg presence (tests, between databases)."""
    _known.clear()


def msg_seen_due(agent: Agent, now: datetime | None = None) -> bool:
    """Whether a msg call should refresh the agent's presence (none stored in MSG_SEEN_EVERY)."""
    now = now or timezone.now()
    known = _known.get(agent.pk)
    if known is not None and known <= now < known + MSG_SEEN_EVERY:
        return False
    stored = AgentActivity.objects.filter(agent=agent).values_list("msg_seen_at", flat=True).first()
    if stored is not None and stored <= now < stored + MSG_SEEN_EVERY:
        _known[agent.pk] = stored
        return False
    return True


def seen_through_msg(agent: Agent, now: datetime | None = None) -> None:
    """A `pocolobby msg` call (a tool call with no runtime headers): the agent is present.

    One conditional write at most every MSG_SEEN_EVERY; the first makes its host `msg` when no
    bridge ever named one."""
    now = now or timezone.now()
    transaction.on_commit(lambda: _known.__setitem__(agent.pk, now))
    due = AgentActivity.objects.filter(agent=agent).exclude(msg_seen_at__gt=now - MSG_SEEN_EVERY)
    if due.update(msg_seen_at=now):
        AgentActivity.objects.filter(agent=agent, host="").update(host=Host.MSG)
        return
    if not AgentActivity.objects.filter(agent=agent).exists():
        AgentActivity.objects.get_or_create(
            agent=agent, defaults={"msg_seen_at": now, "host": Host.MSG}
        )


def watch_agents(
    watcher: Agent, agent_ids: list[str] | None, on: bool, runtime: RuntimeCaller | None = None
) -> list[str] | None:
    """Start (or stop) pushing the watcher `activity` events about `agent_ids` (None: all).

    Answers what is watched now: None when nothing, [] for every agent. Starting announces
    nothing already known (the present becomes the baseline; list_agents shows it)."""
    with transaction.atomic():
        fence(watcher, runtime)
        names = (
            [a.agent_id for a in _admitted(watcher.lobby_id, agent_ids)]
            if agent_ids is not None
            else []
        )
        row, _ = AgentActivity.objects.select_for_update().get_or_create(agent=watcher)
        current: list[str] | None = row.watching
        if not on:
            if agent_ids is None or current is None or current == []:
                watched = None
            else:
                watched = [n for n in current if n not in names] or None
        elif agent_ids is None or current == []:
            watched = []
        else:
            watched = list(dict.fromkeys([*(current or []), *names]))
        row.watching = watched
        row.save(update_fields=["watching"])
    if watched is not None:
        # What each agent does now is the baseline, so the first event is a real change.
        note_changes(timezone.now(), watcher.lobby_id)
    return watched
