"""When a daily schedule fires: local wall-clock times in an IANA zone, turned into UTC instants.

Schedules are written the way people think of them ("09:00 in Europe/Berlin, weekdays"), so
occurrences follow the zone's clock across daylight-saving changes:

- a local time skipped in spring (it does not exist that day) runs at the transition instant,
  the first instant after the jump, which reads as the end of the gap on the local clock;
- a local time repeated in autumn runs once, at its first occurrence (fold=0);
- two configured times that land on the same instant (both inside one gap) run once.

Everything here is pure: no Django, no database, no clock. Callers pass "now" in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

MAX_TIMES = 24
_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
# IANA names only use ASCII letters, digits, "_", "+", "-" and "/" between parts; no ".", so
# no ".." and no file such as "zone1970.tab", and no leading "/" (absolute paths).
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
# "localtime" is the server's own zone under an alias; a schedule must not depend on the host.
_REFUSED_ZONES = frozenset({"localtime", "posixrules"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
# With weekdays set, the next allowed day is at most 7 days away; one more day covers a local
# date that already ended (or a clock fold that moves its slot before "after").
_SEARCH_DAYS = 9


class SlotError(ValueError):
    """A schedule's times, zone or weekdays are not usable; the message names the bad value."""


def parse_times(values: list[str]) -> list[time]:
    """Validate 1-24 distinct "HH:MM" strings and return them sorted, so slots fire in order."""
    if not isinstance(values, list | tuple):
        raise SlotError('times must be a list of "HH:MM" strings')
    if not 1 <= len(values) <= MAX_TIMES:
        raise SlotError(f"times must list 1-{MAX_TIMES} times of day, got {len(values)}")
    seen: dict[time, int] = {}
    for index, value in enumerate(values):
        match = _TIME.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise SlotError(f"times[{index}] {value!r} is not a time of day (HH:MM, 00:00-23:59)")
        parsed = time(int(match[1]), int(match[2]))
        if parsed in seen:
            raise SlotError(f"times[{index}] {value!r} repeats times[{seen[parsed]}]")
        seen[parsed] = index
    return sorted(seen)


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    # available_timezones() walks the zone database on disk, so ask it once per process.
    return frozenset(available_timezones())


def load_zone(name: str) -> ZoneInfo:
    """Return the IANA zone, refusing anything that is not a plain zone name.

    The name comes from users, and ZoneInfo reads files named after it, so paths, "..",
    data files and host aliases are refused before the file system is touched.
    """
    unknown = SlotError(f"unknown time zone {name!r}")
    if (
        not isinstance(name, str)
        or len(name) > 255
        or not _ZONE_NAME.fullmatch(name)
        or name in _REFUSED_ZONES
        or name not in _known_zones()
    ):
        raise unknown
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError) as error:
        raise unknown from error


def parse_weekdays(values: list[int] | None) -> frozenset[int] | None:
    """Validate ISO weekdays (1=Monday..7=Sunday); None means the schedule runs every day."""
    if values is None:
        return None
    if not isinstance(values, list | tuple):
        raise SlotError("weekdays must be a list of ISO weekdays (1=Monday..7=Sunday)")
    if not 1 <= len(values) <= 7:
        raise SlotError(f"weekdays must list 1-7 ISO weekdays, got {len(values)}")
    seen: dict[int, int] = {}
    for index, value in enumerate(values):
        # bool is an int; True is not a weekday.
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 7:
            raise SlotError(
                f"weekdays[{index}] {value!r} is not an ISO weekday (1=Monday..7=Sunday)"
            )
        if value in seen:
            raise SlotError(f"weekdays[{index}] {value!r} repeats weekdays[{seen[value]}]")
        seen[value] = index
    return frozenset(seen)


def _check_rule(times: Sequence[time], weekdays: frozenset[int] | None) -> None:
    # An empty rule would make next_slot search forever (or report nothing, silently).
    if not times:
        raise SlotError("a schedule needs at least one time of day")
    if weekdays is not None and (not weekdays or not weekdays <= set(range(1, 8))):
        raise SlotError("weekdays must be a non-empty set of ISO weekdays (1-7)")


def _utc(value: datetime, what: str) -> datetime:
    # A naive datetime would silently be read in the server's zone.
    if value.tzinfo is None or value.utcoffset() is None:
        raise SlotError(f"{what} must be an aware datetime")
    return value.astimezone(UTC)


def _seconds(instant: datetime) -> int:
    return (instant - _EPOCH) // _SECOND


def _wall(zone: ZoneInfo, seconds: int) -> datetime:
    """The naive local clock reading at a POSIX second."""
    return (_EPOCH + timedelta(seconds=seconds)).astimezone(zone).replace(tzinfo=None, fold=0)


def _instant(zone: ZoneInfo, local: datetime) -> datetime:
    """The UTC instant a naive local wall time fires at, under the DST rules above."""
    first = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = local.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return first
    earlier, later = min(first, second), max(first, second)
    if earlier.astimezone(zone).replace(tzinfo=None, fold=0) == local:
        # The clock read this time twice: fire at the first reading only.
        return earlier
    # The clock jumped over this time. The jump lies in (earlier, later]; find the first
    # second whose reading is past the skipped time (tzdata transitions are whole seconds).
    low, high = _seconds(earlier), _seconds(later)
    while high - low > 1:
        middle = (low + high) // 2
        if _wall(zone, middle) > local:
            high = middle
        else:
            low = middle
    return _EPOCH + timedelta(seconds=high)


def _day_slots(
    zone: ZoneInfo, times: Iterable[time], weekdays: frozenset[int] | None, day: date
) -> list[datetime]:
    """The instants of one local date's slots, sorted and without duplicates.

    The weekday is that of the configured date, even when a skipped time fires on the
    next local date (a gap across midnight).
    """
    if weekdays is not None and day.isoweekday() not in weekdays:
        return []
    return sorted({_instant(zone, datetime.combine(day, moment)) for moment in times})


def _local_date(zone: ZoneInfo, instant: datetime) -> date:
    return instant.astimezone(zone).date()


def slots_between(
    zone: ZoneInfo,
    times: Sequence[time],
    weekdays: frozenset[int] | None,
    start: datetime,
    end: datetime,
) -> list[datetime]:
    """Every occurrence instant in (start, end], in UTC and in order, each instant once."""
    _check_rule(times, weekdays)
    start, end = _utc(start, "start"), _utc(end, "end")
    if end <= start:
        return []
    found: set[datetime] = set()
    # A day's slots can move off its date (a gap or fold across midnight): look one day out.
    day = _local_date(zone, start) - timedelta(days=1)
    last = _local_date(zone, end) + timedelta(days=1)
    while day <= last:
        found.update(s for s in _day_slots(zone, times, weekdays, day) if start < s <= end)
        day += timedelta(days=1)
    return sorted(found)


def next_slot(
    zone: ZoneInfo, times: Sequence[time], weekdays: frozenset[int] | None, after: datetime
) -> datetime:
    """The first occurrence strictly after `after`, so a slot that just fired is not repeated."""
    _check_rule(times, weekdays)
    after = _utc(after, "after")
    day = _local_date(zone, after) - timedelta(days=1)
    for offset in range(_SEARCH_DAYS + 1):
        # Slots never run backwards from one local date to the next, so the first date with
        # a slot after `after` holds the answer.
        later = [
            s for s in _day_slots(zone, times, weekdays, day + timedelta(days=offset)) if s > after
        ]
        if later:
            return later[0]
    raise SlotError(f"no slot within {_SEARCH_DAYS} days after {after.isoformat()}")


def latest_missed(
    zone: ZoneInfo,
    times: Sequence[time],
    weekdays: frozenset[int] | None,
    last_fired: datetime | None,
    created_at: datetime,
    now: datetime,
) -> datetime | None:
    """The latest occurrence in (last_fired or created_at, now], or None.

    After an outage only this one slot is sent (marked late), never a burst of every slot
    missed; so search backwards from now and stop at the first date that has one.
    """
    _check_rule(times, weekdays)
    since = _utc(last_fired if last_fired is not None else created_at, "since")
    now = _utc(now, "now")
    if now <= since:
        return None
    day = _local_date(zone, now) + timedelta(days=1)
    first = _local_date(zone, since) - timedelta(days=1)
    while day >= first:
        missed = [s for s in _day_slots(zone, times, weekdays, day) if since < s <= now]
        if missed:
            return missed[-1]
        day -= timedelta(days=1)
    return None
