"""Who is doing what: one precedence, written once, for `list_agents` and the dashboard's chips.

From live facts alone (the model never picks a state), the first that holds wins:

1. resting         - the owner or a coordinator rested the agent.
2. away            - not present: no bridge connected and no `pocolobby msg` call in 30 min.
3. not_responding  - notified messages it has not acknowledged since (unseen_notified_count).
4. working         - a turn is open, or the last one ended under 2 minutes ago (a bound).
5. away            - nothing for 30 min: no message sent or direct one received, no turn,
                     no msg call.
6. idle            - present, recent signs of life, no turn open.

`since` is when the state began, as far as the facts tell (None when they do not).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings

WORKING_AFTER_TURN = timedelta(minutes=2)
AWAY_AFTER = timedelta(minutes=30)


def working_after() -> timedelta:
    """How long a turn counts as work past its end, as this broker is configured."""
    return timedelta(seconds=settings.BOUNDS.working_after_turn_seconds)


class Activity(StrEnum):
    WORKING = "working"
    IDLE = "idle"
    RESTING = "resting"
    AWAY = "away"
    NOT_RESPONDING = "not_responding"


@dataclass(frozen=True)
class ActivityFacts:
    resting: bool
    connected: bool  # a live bridge connection (the dashboard: for the current generation)
    unseen_notified: int = 0
    oldest_unseen_notified_at: datetime | None = None
    turn_started_at: datetime | None = None
    turn_ended_at: datetime | None = None  # None while a started turn is open
    last_message_at: datetime | None = None
    msg_seen_at: datetime | None = None

    @property
    def turn_open(self) -> bool:
        return self.turn_started_at is not None and self.turn_ended_at is None

    def through_msg(self, now: datetime) -> bool:
        """Present only by its `pocolobby msg` calls: no bridge, a call in the last 30 min."""
        return (
            not self.connected
            and self.msg_seen_at is not None
            and now - self.msg_seen_at < AWAY_AFTER
        )


@dataclass(frozen=True)
class State:
    activity: Activity
    since: datetime | None


def _latest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def activity_of(
    facts: ActivityFacts, now: datetime, working_after: timedelta = WORKING_AFTER_TURN
) -> State:
    """The agent's activity by the module's fixed precedence, and since when; a turn counts
    as work for `working_after` past its end (POCOLOBBY_WORKING_AFTER_TURN_SECONDS)."""
    if facts.resting:
        return State(Activity.RESTING, None)
    signs = _latest(facts.last_message_at, facts.turn_ended_at, facts.msg_seen_at)
    if not facts.connected and not facts.through_msg(now):
        gone = facts.msg_seen_at + AWAY_AFTER if facts.msg_seen_at is not None else None
        return State(Activity.AWAY, gone)
    if facts.unseen_notified > 0:
        return State(Activity.NOT_RESPONDING, facts.oldest_unseen_notified_at)
    if facts.turn_open:
        return State(Activity.WORKING, facts.turn_started_at)
    if facts.turn_ended_at is not None and now - facts.turn_ended_at < working_after:
        return State(Activity.WORKING, facts.turn_started_at)
    if signs is None or now - signs >= AWAY_AFTER:
        return State(Activity.AWAY, None if signs is None else signs + AWAY_AFTER)
    idle_since = signs
    if facts.turn_ended_at is not None and facts.turn_ended_at == signs:
        idle_since = facts.turn_ended_at + working_after
    return State(Activity.IDLE, idle_since)
