"""Daily schedule slots: local wall-clock times in an IANA zone, across daylight-saving changes."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lobbies.slots import (
    SlotError,
    latest_missed,
    load_zone,
    next_slot,
    parse_times,
    parse_weekdays,
    slots_between,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
KOLKATA = ZoneInfo("Asia/Kolkata")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold)


def at(*values: str) -> list[time]:
    return parse_times(list(values))


# --- daylight saving --------------------------------------------------------------------------


def test_a_time_skipped_in_spring_runs_at_the_transition_instant_in_berlin():
    # 2026-03-29: 02:00 CET -> 03:00 CEST, so 02:30 does not exist that day.
    slot = next_slot(BERLIN, at("02:30"), None, utc(2026, 3, 28, 12))
    assert slot == utc(2026, 3, 29, 1, 0)
    assert slot.tzinfo is UTC
    assert slot.astimezone(BERLIN).replace(tzinfo=None) == datetime(2026, 3, 29, 3, 0)
    # The days around it are ordinary: 01:30 UTC (CET) before, 00:30 UTC (CEST) after.
    assert next_slot(BERLIN, at("02:30"), None, utc(2026, 3, 27, 12)) == utc(2026, 3, 28, 1, 30)
    assert next_slot(BERLIN, at("02:30"), None, slot) == utc(2026, 3, 30, 0, 30)


def test_a_time_repeated_in_autumn_runs_once_at_its_first_occurrence_in_berlin():
    # 2026-10-25: 03:00 CEST -> 02:00 CET, so 02:30 happens twice; only the first one fires.
    times = at("02:30")
    slot = next_slot(BERLIN, times, None, utc(2026, 10, 24, 12))
    assert slot == utc(2026, 10, 25, 0, 30)
    assert slot.astimezone(BERLIN).fold == 0
    # The second 02:30 (01:30 UTC) is not a slot: the next one is the following night.
    assert next_slot(BERLIN, times, None, slot) == utc(2026, 10, 26, 1, 30)
    day = slots_between(BERLIN, times, None, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))
    assert day == [utc(2026, 10, 25, 0, 30)]


def test_new_york_spring_forward_runs_the_skipped_time_at_three():
    # 2026-03-08: 02:00 EST -> 03:00 EDT at 07:00 UTC.
    slot = next_slot(NEW_YORK, at("02:30"), None, utc(2026, 3, 7, 12))
    assert slot == utc(2026, 3, 8, 7, 0)
    assert slot.astimezone(NEW_YORK).replace(tzinfo=None) == datetime(2026, 3, 8, 3, 0)
    # A time after the gap keeps its new offset.
    assert next_slot(NEW_YORK, at("09:00"), None, utc(2026, 3, 8, 0)) == utc(2026, 3, 8, 13)


def test_new_york_fall_back_runs_the_repeated_time_once_in_daylight_time():
    # 2026-11-01: 02:00 EDT -> 01:00 EST at 06:00 UTC; 01:30 EDT is 05:30 UTC.
    times = at("01:30")
    slots = slots_between(NEW_YORK, times, None, utc(2026, 10, 31, 12), utc(2026, 11, 2, 12))
    assert slots == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_lord_howe_half_hour_shifts():
    # 2026-10-04: 02:00 -> 02:30 (+10:30 -> +11) at 15:30 UTC the day before.
    assert next_slot(LORD_HOWE, at("02:15"), None, utc(2026, 10, 3, 0)) == utc(2026, 10, 3, 15, 30)
    # 2026-04-05: 02:00 -> 01:30 (+11 -> +10:30); 01:45 runs once, at +11.
    times = at("01:45")
    slots = slots_between(LORD_HOWE, times, None, utc(2026, 4, 4, 0), utc(2026, 4, 5, 0))
    assert slots == [utc(2026, 4, 4, 14, 45)]


def test_two_times_inside_one_gap_run_once_at_the_transition():
    times = at("02:15", "02:45", "03:00")
    slots = slots_between(BERLIN, times, None, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
    assert slots == [utc(2026, 3, 29, 1, 0)]
    # On an ordinary day they are three slots.
    slots = slots_between(BERLIN, times, None, utc(2026, 3, 29, 12), utc(2026, 3, 30, 12))
    assert slots == [utc(2026, 3, 30, 0, 15), utc(2026, 3, 30, 0, 45), utc(2026, 3, 30, 1, 0)]


def test_a_skipped_day_runs_its_slots_at_the_transition_and_keeps_its_weekday():
    # Samoa skipped Friday 2011-12-30 altogether (-10 -> +14 at 10:00 UTC). Its 09:00 runs at
    # the jump, which reads Saturday 00:00, and still counts as Friday's slot.
    apia = ZoneInfo("Pacific/Apia")
    slots = slots_between(apia, at("09:00"), None, utc(2011, 12, 29), utc(2011, 12, 31))
    assert slots == [utc(2011, 12, 29, 19), utc(2011, 12, 30, 10), utc(2011, 12, 30, 19)]
    fridays = frozenset({5})
    assert next_slot(apia, at("09:00"), fridays, utc(2011, 12, 29, 20)) == utc(2011, 12, 30, 10)


@pytest.mark.parametrize(
    ("zone", "first_day"),
    [(BERLIN, date(2026, 3, 26)), (BERLIN, date(2026, 10, 22)), (NEW_YORK, date(2026, 3, 5))],
)
def test_a_week_across_a_dst_change_has_each_days_slot_exactly_once(zone, first_day):
    times = at("02:30", "09:00")
    start = datetime.combine(first_day, time(0), tzinfo=zone)
    slots = slots_between(zone, times, None, start, start + timedelta(days=7))
    assert len(slots) == 14 == len(set(slots))
    assert slots == sorted(slots)
    days = [slot.astimezone(zone).date() for slot in slots]
    assert days == [first_day + timedelta(days=n // 2) for n in range(14)]
    assert all(slot.tzinfo is UTC for slot in slots)


# --- ordinary days ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "after", "expected"),
    [
        (BERLIN, utc(2026, 1, 15, 0), utc(2026, 1, 15, 8)),  # CET, +1
        (BERLIN, utc(2026, 6, 15, 0), utc(2026, 6, 15, 7)),  # CEST, +2
        (KOLKATA, utc(2026, 6, 15, 0), utc(2026, 6, 15, 3, 30)),  # +5:30, no DST
        (ZoneInfo("UTC"), utc(2026, 6, 15, 0), utc(2026, 6, 15, 9)),
        # Already past 09:00 Berlin: tomorrow.
        (BERLIN, utc(2026, 6, 15, 7, 0, 1), utc(2026, 6, 16, 7)),
    ],
)
def test_ordinary_days(zone, after, expected):
    assert next_slot(zone, at("09:00"), None, after) == expected


def test_next_slot_is_strictly_after_so_a_slot_that_just_fired_is_not_repeated():
    slot = utc(2026, 6, 15, 7)
    assert next_slot(BERLIN, at("09:00"), None, slot - timedelta(microseconds=1)) == slot
    assert next_slot(BERLIN, at("09:00"), None, slot) == utc(2026, 6, 16, 7)


def test_after_may_be_given_in_any_zone():
    after = local(NEW_YORK, 2026, 6, 14, 20, 0)  # 2026-06-15 00:00 UTC
    slot = next_slot(BERLIN, at("09:00"), None, after)
    assert slot == utc(2026, 6, 15, 7) and slot.tzinfo is UTC


def test_weekdays_filter_skips_to_the_next_allowed_day():
    workdays = parse_weekdays([1, 2, 3, 4, 5])
    friday_after_nine = local(BERLIN, 2026, 6, 12, 10, 0)
    monday_nine = local(BERLIN, 2026, 6, 15, 9, 0)
    assert next_slot(BERLIN, at("09:00"), workdays, friday_after_nine) == monday_nine
    sundays = parse_weekdays([7])
    assert next_slot(BERLIN, at("09:00"), sundays, friday_after_nine) == local(
        BERLIN, 2026, 6, 14, 9, 0
    )
    # A Sunday slot just fired: the next is a week later.
    sunday_nine = local(BERLIN, 2026, 6, 14, 9, 0)
    assert next_slot(BERLIN, at("09:00"), sundays, sunday_nine) == local(BERLIN, 2026, 6, 21, 9, 0)
    week = slots_between(BERLIN, at("09:00"), workdays, friday_after_nine, monday_nine)
    assert week == [monday_nine]


def test_several_times_a_day_fire_in_order():
    times = at("18:00", "08:00", "12:30")
    assert times == [time(8), time(12, 30), time(18)]
    after = utc(2026, 6, 15, 0)
    fired = []
    for _ in range(4):
        after = next_slot(BERLIN, times, None, after)
        fired.append(after.astimezone(BERLIN).replace(tzinfo=None))
    assert fired == [
        datetime(2026, 6, 15, 8),
        datetime(2026, 6, 15, 12, 30),
        datetime(2026, 6, 15, 18),
        datetime(2026, 6, 16, 8),
    ]


def test_slots_between_is_half_open():
    times = at("09:00")
    slot = utc(2026, 6, 15, 7)
    assert slots_between(BERLIN, times, None, slot - timedelta(hours=1), slot) == [slot]
    assert slots_between(BERLIN, times, None, slot, slot + timedelta(hours=1)) == []
    assert slots_between(BERLIN, times, None, slot, slot - timedelta(hours=1)) == []


# --- after an outage --------------------------------------------------------------------------


def test_a_three_day_outage_sends_only_the_latest_missed_slot():
    times = at("09:00", "17:00")
    last_fired = local(BERLIN, 2026, 6, 15, 9, 0)
    now = local(BERLIN, 2026, 6, 18, 10, 0)
    created = local(BERLIN, 2026, 6, 1, 12, 0)
    assert len(slots_between(BERLIN, times, None, last_fired, now)) == 6
    assert latest_missed(BERLIN, times, None, last_fired, created, now) == local(
        BERLIN, 2026, 6, 18, 9, 0
    )


def test_latest_missed_bounds():
    times = at("09:00")
    created = local(BERLIN, 2026, 6, 15, 8, 0)
    nine = local(BERLIN, 2026, 6, 15, 9, 0)
    # Nothing due yet.
    assert latest_missed(BERLIN, times, None, None, created, nine - timedelta(seconds=1)) is None
    # Never fired: counted from creation; a slot exactly at "now" is due.
    assert latest_missed(BERLIN, times, None, None, created, nine) == nine
    # The slot that already fired is not missed again.
    assert latest_missed(BERLIN, times, None, nine, created, nine + timedelta(hours=20)) is None
    # A schedule created after today's slot does not owe it.
    later = local(BERLIN, 2026, 6, 15, 9, 30)
    assert latest_missed(BERLIN, times, None, None, later, later + timedelta(hours=1)) is None


def test_latest_missed_respects_weekdays_and_dst():
    # Last fired Friday; the outage spans the spring-forward weekend; only Sundays are allowed.
    sundays = frozenset({7})
    times = at("02:30")
    missed = latest_missed(
        BERLIN, times, sundays, utc(2026, 3, 27), utc(2026, 3, 1), utc(2026, 3, 31)
    )
    assert missed == utc(2026, 3, 29, 1, 0)


# --- invalid input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["09:00", "10:00", "25:00"], "times[2] '25:00' is not a time of day (HH:MM, 00:00-23:59)"),
        (["24:00"], "times[0] '24:00' is not a time of day"),
        (["9:00"], "times[0] '9:00' is not a time of day"),
        (["09:60"], "times[0] '09:60' is not a time of day"),
        (["09:00:00"], "times[0] '09:00:00' is not a time of day"),
        (["09:00 "], "times[0] '09:00 ' is not a time of day"),
        (["\uff10\uff19:00"], "times[0] '\uff10\uff19:00' is not a time of day"),  # full-width
        (["08:00", 900], "times[1] 900 is not a time of day"),
        (["08:00", None], "times[1] None is not a time of day"),
        (["08:00", "09:00", "08:00"], "times[2] '08:00' repeats times[0]"),
        ([], "times must list 1-24 times of day, got 0"),
        (
            [f"{h:02}:00" for h in range(24)] + ["00:30"],
            "times must list 1-24 times of day, got 25",
        ),
        ("09:00", "times must be a list"),
    ],
)
def test_bad_times_are_refused_by_name(values, message):
    with pytest.raises(SlotError, match=re.escape(message)):
        parse_times(values)


def test_twenty_four_times_and_the_ends_of_the_day_are_fine():
    assert len(parse_times([f"{h:02}:00" for h in range(24)])) == 24
    assert parse_times(["23:59", "00:00"]) == [time(0), time(23, 59)]


@pytest.mark.parametrize(
    "name",
    [
        "Mars/Base",
        "",
        "Europe",
        "europe/berlin",
        "/etc/localtime",
        "/usr/share/zoneinfo/Europe/Berlin",
        "../zoneinfo/Europe/Berlin",
        "Europe/../Europe/Berlin",
        "Europe/Berlin/",
        "zone1970.tab",
        "tzdata.zi",
        "localtime",
        "posixrules",
        "right/Europe/Berlin",
        "Europe/Berlin\x00",
        None,
    ],
)
def test_unknown_zones_are_refused_by_name(name):
    with pytest.raises(SlotError, match=re.escape(f"unknown time zone {name!r}")):
        load_zone(name)


@pytest.mark.parametrize("name", ["Europe/Berlin", "UTC", "Etc/GMT+5", "America/Port-au-Prince"])
def test_known_zones_load(name):
    assert load_zone(name).key == name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([0], "weekdays[0] 0 is not an ISO weekday (1=Monday..7=Sunday)"),
        ([1, 8], "weekdays[1] 8 is not an ISO weekday"),
        ([True], "weekdays[0] True is not an ISO weekday"),
        (["1"], "weekdays[0] '1' is not an ISO weekday"),
        ([1, 2, 1], "weekdays[2] 1 repeats weekdays[0]"),
        ([], "weekdays must list 1-7 ISO weekdays, got 0"),
        ([1, 2, 3, 4, 5, 6, 7, 1], "weekdays must list 1-7 ISO weekdays, got 8"),
        ("12345", "weekdays must be a list"),
    ],
)
def test_bad_weekdays_are_refused_by_name(values, message):
    with pytest.raises(SlotError, match=re.escape(message)):
        parse_weekdays(values)


def test_weekdays_parse():
    assert parse_weekdays(None) is None
    assert parse_weekdays([7, 1]) == frozenset({1, 7})


def test_naive_datetimes_and_empty_rules_are_refused():
    with pytest.raises(SlotError, match="after must be an aware datetime"):
        next_slot(BERLIN, at("09:00"), None, datetime(2026, 6, 15))
    with pytest.raises(SlotError, match="at least one time"):
        next_slot(BERLIN, [], None, utc(2026, 6, 15))
    with pytest.raises(SlotError, match="weekdays"):
        next_slot(BERLIN, at("09:00"), frozenset(), utc(2026, 6, 15))
    with pytest.raises(SlotError, match="weekdays"):
        slots_between(BERLIN, at("09:00"), frozenset({0}), utc(2026, 6, 15), utc(2026, 6, 16))


# --- properties -------------------------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
YEAR = utc(2026, 1, 1)
# 2026 transitions of the zones above, to start searches close to them often.
TRANSITIONS = [
    utc(2026, 3, 29, 1),
    utc(2026, 10, 25, 1),
    utc(2026, 3, 8, 7),
    utc(2026, 11, 1, 6),
    utc(2026, 4, 4, 15),
    utc(2026, 10, 3, 15, 30),
]

zones = st.sampled_from(ZONES).map(ZoneInfo)
instants = st.one_of(
    st.integers(0, 365 * 86400 - 1).map(lambda s: YEAR + timedelta(seconds=s)),
    st.tuples(st.sampled_from(TRANSITIONS), st.integers(-2 * 86400, 2 * 86400)).map(
        lambda pair: pair[0] + timedelta(seconds=pair[1])
    ),
)
# Hours 0-3 are where the clocks change; ask for them often.
hours = st.one_of(st.integers(0, 23), st.integers(0, 3))
minutes = st.one_of(st.integers(0, 59), st.sampled_from([0, 15, 30, 45]))
times_of_day = st.lists(st.builds(time, hours, minutes), min_size=1, max_size=5, unique=True).map(
    sorted
)
weekday_sets = st.none() | st.frozensets(st.integers(1, 7), min_size=1)


def _exists(zone: ZoneInfo, wall: datetime) -> bool:
    aware = wall.replace(tzinfo=zone)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


@settings(max_examples=300, deadline=None)
@given(zone=zones, times=times_of_day, weekdays=weekday_sets, after=instants)
def test_next_slot_is_the_first_slot_after_and_reads_as_a_configured_time(
    zone, times, weekdays, after
):
    slot = next_slot(zone, times, weekdays, after)
    assert slot.tzinfo is UTC
    assert slot > after
    assert slot - after <= timedelta(days=8)
    assert slots_between(zone, times, weekdays, after, slot) == [slot]
    assert slots_between(zone, times, weekdays, after, slot + timedelta(days=3))[0] == slot

    reading = slot.astimezone(zone)
    wall = reading.replace(tzinfo=None, fold=0)
    if wall.time() in times and _exists(zone, wall):
        # A real reading of a configured time: the first of two if the clock repeated it.
        assert reading.fold == 0
        assert weekdays is None or wall.isoweekday() in weekdays
    else:
        # Otherwise the clock jumped at this very instant over a configured time that day.
        before = (slot - timedelta(seconds=1)).astimezone(zone).replace(tzinfo=None, fold=0)
        skipped = [
            datetime.combine(day, moment)
            for day in (wall.date(), wall.date() - timedelta(days=1))
            for moment in times
            if weekdays is None or day.isoweekday() in weekdays
        ]
        assert any(
            before < candidate < wall and not _exists(zone, candidate) for candidate in skipped
        ), (slot, wall, times)


def _fires(zone: ZoneInfo, times: list[time], weekdays, instant: datetime) -> bool:
    """Brute-force oracle for a whole-minute instant (all test zones change on whole minutes)."""
    reading = instant.astimezone(zone)
    wall = reading.replace(tzinfo=None, fold=0)
    allowed = weekdays is None or wall.isoweekday() in weekdays
    if reading.fold == 0 and wall.time() in times and allowed:
        return True
    previous = (instant - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None, fold=0)
    # The clock jumped forward at this instant: fire for the configured times it skipped.
    skipped = previous + timedelta(minutes=1)
    while skipped < wall:
        if skipped.time() in times and (weekdays is None or skipped.isoweekday() in weekdays):
            return True
        skipped += timedelta(minutes=1)
    return False


@settings(max_examples=100, deadline=None)
@given(zone=zones, times=times_of_day, weekdays=weekday_sets, start=instants)
def test_slots_between_matches_a_minute_by_minute_oracle(zone, times, weekdays, start):
    end = start + timedelta(hours=30)
    minute = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    expected = []
    while minute <= end:
        if _fires(zone, times, weekdays, minute):
            expected.append(minute)
        minute += timedelta(minutes=1)
    assert slots_between(zone, times, weekdays, start, end) == expected


@settings(max_examples=200, deadline=None)
@given(
    zone=zones,
    times=times_of_day,
    weekdays=weekday_sets,
    created=instants,
    span=st.integers(0, 10 * 86400),
    fired=st.booleans(),
)
def test_latest_missed_is_the_last_slot_since_it_last_fired(
    zone, times, weekdays, created, span, fired
):
    now = created + timedelta(seconds=span)
    last_fired = created + timedelta(seconds=span // 3) if fired else None
    since = last_fired if last_fired is not None else created
    due = slots_between(zone, times, weekdays, since, now)
    missed = latest_missed(zone, times, weekdays, last_fired, created, now)
    assert missed == (due[-1] if due else None)
