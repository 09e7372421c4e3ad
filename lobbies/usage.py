"""Plan usage: the latest reading each agent's status line sent, one row per agent in the store.

A reading is a gauge about the agent's Claude account, not an action in the lobby: the broker
keeps only the newest per agent (one upsert replaces it) and never keeps history. In the store,
so every broker process answers `list_agents` and the dashboard's Accounts the same. The status
line sends a reading when it changes or every five minutes; when the store already holds the
very same reading from less than REWRITE_AFTER ago, nothing is written.

Weekly pace: the even line is the share of the seven-day window that has passed, so
`pace_points = used_percentage - elapsed share * 100`; positive means spending faster than an
even week. More than OFF_PACE_POINTS either way is off pace. The five-hour window has no pace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import (
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
)

from lobbies.api.answers import UsageEntry, UsageWindow
from lobbies.api.schemas import Operation, in_utc
from lobbies.models import UsageReading

WEEK = timedelta(days=7)
FIVE_HOURS = timedelta(hours=5)
OFF_PACE_POINTS = 5.0
STALE_AFTER = timedelta(minutes=30)  # shown with its age
HIDDEN_AFTER = timedelta(days=1)  # not shown at all
REWRITE_AFTER = timedelta(seconds=60)  # an unchanged reading is stored again after this

_EMAIL = re.compile(r"^[^@\s<>\"']{1,64}@[^@\s<>\"']{1,189}$")
# Epoch seconds a status line may send: 2001-09-09 .. 2286-11-20, so milliseconds are refused.
_EPOCH_MIN, _EPOCH_MAX = 1_000_000_000, 9_999_999_999


class WindowReading(Operation):
    """One rate-limit window as Claude Code reports it."""

    used_percentage: StrictInt | StrictFloat = Field(ge=0, le=100)
    resets_at: StrictInt | StrictStr

    @field_validator("resets_at")
    @classmethod
    def _moment(cls, value: int | str) -> int | str:
        moment_of(value)  # raises ValueError with a sentence
        return value

    @property
    def resets(self) -> datetime:
        return moment_of(self.resets_at)


class UsageReport(Operation):
    """The body of PUT /v1/usage."""

    five_hour: WindowReading
    seven_day: WindowReading
    account_email: StrictStr | None = Field(default=None, max_length=254)

    @field_validator("account_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not _EMAIL.match(value):
            raise ValueError("is not an email address")
        return value.lower()


def moment_of(value: int | str) -> datetime:
    """Epoch seconds or an ISO 8601 time with a zone, as an aware UTC datetime."""
    if isinstance(value, int):
        if not _EPOCH_MIN <= value <= _EPOCH_MAX:
            raise ValueError("must be epoch seconds (10 digits) or an ISO 8601 time")
        return datetime.fromtimestamp(value, UTC)
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("must be epoch seconds or an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise ValueError("an ISO 8601 time needs a zone (Z or +hh:mm)")
    return in_utc(moment)


@dataclass(frozen=True)
class Window:
    used_percentage: float
    resets_at: datetime

    def left(self) -> float:
        return max(0.0, 100.0 - self.used_percentage)


@dataclass(frozen=True)
class Reading:
    five_hour: Window
    seven_day: Window
    account_email: str | None
    received_at: datetime


def record_reading(agent_pk: int, report: UsageReport, now: datetime) -> Reading:
    """Store `report` as the agent's latest reading (one upsert), replacing the one before,
    unless the store holds the very same reading from less than REWRITE_AFTER ago (a read,
    no write); the reading as stored."""
    reading = Reading(
        five_hour=Window(float(report.five_hour.used_percentage), report.five_hour.resets),
        seven_day=Window(float(report.seven_day.used_percentage), report.seven_day.resets),
        account_email=report.account_email,
        received_at=now,
    )
    last = readings_for([agent_pk]).get(agent_pk)
    if (
        last is not None
        and (last.five_hour, last.seven_day, last.account_email)
        == (reading.five_hour, reading.seven_day, reading.account_email)
        and timedelta(0) <= now - last.received_at < REWRITE_AFTER
    ):
        return last
    UsageReading.objects.bulk_create(
        [
            UsageReading(
                agent_id=agent_pk,
                five_hour_used=reading.five_hour.used_percentage,
                five_hour_resets_at=reading.five_hour.resets_at,
                seven_day_used=reading.seven_day.used_percentage,
                seven_day_resets_at=reading.seven_day.resets_at,
                account_email=reading.account_email,
                received_at=now,
            )
        ],
        update_conflicts=True,
        unique_fields=["agent"],
        update_fields=[
            "five_hour_used",
            "five_hour_resets_at",
            "seven_day_used",
            "seven_day_resets_at",
            "account_email",
            "received_at",
        ],
    )
    return reading


def readings_for(agent_pks: list[int] | set[int]) -> dict[int, Reading]:
    """The stored latest reading of each of these agents that has one."""
    return {
        row.agent_id: Reading(
            five_hour=Window(row.five_hour_used, row.five_hour_resets_at),
            seven_day=Window(row.seven_day_used, row.seven_day_resets_at),
            account_email=row.account_email,
            received_at=row.received_at,
        )
        for row in UsageReading.objects.filter(agent_id__in=agent_pks)
    }


def pace_points(window: Window, now: datetime) -> float:
    """Used share minus the share of the seven-day window that has passed (points)."""
    start = window.resets_at - WEEK
    elapsed = min(max((now - start) / WEEK, 0.0), 1.0)
    return window.used_percentage - elapsed * 100.0


@dataclass(frozen=True)
class Shown:
    """A reading as pages and list_agents show it at `now`: expired windows dropped."""

    reading: Reading
    five_hour: Window | None
    seven_day: Window | None
    pace_points: float | None
    off_pace: bool
    age: timedelta

    @property
    def stale(self) -> bool:
        return self.age > STALE_AFTER


def shown(reading: Reading | None, now: datetime) -> Shown | None:
    """None for no reading or one older than a day; a window past its reset is left out."""
    if reading is None:
        return None
    age = max(now - reading.received_at, timedelta(0))
    if age > HIDDEN_AFTER:
        return None
    five = reading.five_hour if reading.five_hour.resets_at > now else None
    week = reading.seven_day if reading.seven_day.resets_at > now else None
    pace = round(pace_points(week, now), 1) if week else None
    return Shown(reading, five, week, pace, pace is not None and abs(pace) > OFF_PACE_POINTS, age)


def _window_json(window: Window | None) -> UsageWindow | None:
    if window is None:
        return None
    return {
        "used_percentage": window.used_percentage,
        "left_percentage": window.left(),
        "resets_at": window.resets_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
    }


def usage_entry(reading: Reading | None, now: datetime) -> UsageEntry | None:
    """The `usage` field of list_agents."""
    view = shown(reading, now)
    if view is None:
        return None
    return {
        "five_hour": _window_json(view.five_hour),
        "seven_day": _window_json(view.seven_day),
        "pace_points": view.pace_points,
        "off_pace": view.off_pace,
        "reading_age_seconds": int(view.age.total_seconds()),
    }
