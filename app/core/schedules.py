"""Weekly schedules as Coder writes them: ``CRON_TZ=<IANA zone> <minute> <hour> * * <days of week>``.

Used for a workspace's autostart and a person's quiet hours. Only this shape is accepted (day of month and month
must be ``*``): a schedule says at what local time on which weekdays. Minute, hour and day fields take numbers,
``*``, ranges ``a-b``, steps ``*/n`` or ``a-b/n`` and comma lists; days are 0-7 (0 and 7 are Sunday) or
``sun``…``sat``. Times are wall-clock times in the zone, so they stay put across daylight-saving changes:

- a time the clocks skip (02:30 on the night clocks go forward) happens at the first instant after the gap
  (03:00), so that day's start is not lost;
- a time that happens twice (01:30 on the night clocks go back) happens once, the first time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

MAX_LENGTH = 128
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Weekday bit masks as templates store them: bit 0 = Monday … bit 6 = Sunday (datetime.weekday()).
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_ZONE_PREFIX = re.compile(r"^CRON_TZ=(\S+)\s+(.*)$")
# Eight days is enough to find the next match of any non-empty weekly schedule, plus one for DST edges.
_SEARCH_DAYS = 9


class ScheduleError(ValueError):
    """A schedule that does not parse; the message says what is wrong, for the person who wrote it."""


@dataclass(frozen=True)
class Schedule:
    zone: ZoneInfo
    minutes: frozenset[int]
    hours: frozenset[int]
    # Python weekdays: 0 = Monday … 6 = Sunday.
    weekdays: frozenset[int]
    text: str

    def next_after(self, moment: datetime) -> datetime:
        """The first time strictly after ``moment`` the schedule fires, in UTC."""
        local = moment.astimezone(self.zone)
        for offset in range(_SEARCH_DAYS):
            day = (local + timedelta(days=offset)).date()
            if day.weekday() not in self.weekdays:
                continue
            for hour in sorted(self.hours):
                for minute in sorted(self.minutes):
                    fires = _instant(datetime.combine(day, time(hour, minute)), self.zone)
                    if fires > moment:
                        return fires
        raise AssertionError("a weekly schedule with days, hours and minutes always fires within a week")

    def previous_at_or_before(self, moment: datetime) -> datetime:
        """The last time at or before ``moment`` the schedule fired, in UTC."""
        local = moment.astimezone(self.zone)
        for offset in range(_SEARCH_DAYS):
            day = (local - timedelta(days=offset)).date()
            if day.weekday() not in self.weekdays:
                continue
            for hour in sorted(self.hours, reverse=True):
                for minute in sorted(self.minutes, reverse=True):
                    fired = _instant(datetime.combine(day, time(hour, minute)), self.zone)
                    if fired <= moment:
                        return fired
        raise AssertionError("a weekly schedule with days, hours and minutes fires within a week")

    @property
    def is_daily(self) -> bool:
        return len(self.weekdays) == 7 and len(self.hours) == 1 and len(self.minutes) == 1

    def describe(self) -> str:
        """A short human reading: ``09:30 Mon-Fri (Europe/Berlin)``."""
        times = ", ".join(f"{hour:02d}:{minute:02d}" for hour in sorted(self.hours) for minute in sorted(self.minutes))
        return f"{times} {describe_weekdays(self.weekdays)} ({self.zone.key})"


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a wall-clock time in ``zone``: a skipped time moves to the end of the gap, a repeated
    time is its first occurrence."""
    first = wall.replace(tzinfo=zone, fold=0)
    as_utc = first.astimezone(UTC)
    if as_utc.astimezone(zone).replace(tzinfo=None) == wall:
        return as_utc
    # In a gap: fold=0 reads the wall time with the offset before the change, which lands after the gap; the gap
    # ends at the first whole minute whose wall time exists, found from the offset after the change.
    after_gap = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    start = min(as_utc, after_gap)
    while start.astimezone(zone).replace(tzinfo=None) < wall:
        start += timedelta(minutes=1)
    return start


def describe_weekdays(weekdays: frozenset[int]) -> str:
    if len(weekdays) == 7:
        return "daily"
    names = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    ordered = sorted(weekdays)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{names[ordered[0]]}-{names[ordered[-1]]}"
    return ",".join(names[day] for day in ordered)


def parse_schedule(text: str, *, daily_only: bool = False) -> Schedule:
    """Parse ``CRON_TZ=<zone> M H * * D``; raise :class:`ScheduleError` saying what is wrong.

    ``daily_only`` is for quiet hours: one time, every day (``D`` must be ``*``)."""
    text = text.strip()
    if len(text) > MAX_LENGTH:
        raise ScheduleError(f"A schedule is at most {MAX_LENGTH} characters.")
    match = _ZONE_PREFIX.match(text)
    if match is None:
        raise ScheduleError("A schedule starts with CRON_TZ=<time zone>, e.g. 'CRON_TZ=Europe/Berlin 30 9 * * 1-5'.")
    zone = parse_zone(match.group(1))
    fields = match.group(2).split()
    if len(fields) != 5:
        raise ScheduleError("After CRON_TZ=<zone> come five fields: minute hour * * day-of-week.")
    minute, hour, day_of_month, month, day_of_week = fields
    if day_of_month != "*" or month != "*":
        raise ScheduleError("Day of month and month must be '*': a schedule repeats every week.")
    minutes = _field(minute, 0, 59, "minute")
    hours = _field(hour, 0, 23, "hour")
    cron_days = _field(day_of_week.lower(), 0, 7, "day of week", names=DAY_NAMES)
    weekdays = frozenset((day - 1) % 7 for day in cron_days)  # cron 0/7 = Sunday, 1 = Monday
    schedule = Schedule(zone=zone, minutes=minutes, hours=hours, weekdays=weekdays, text=text)
    if daily_only and not schedule.is_daily:
        raise ScheduleError("Quiet hours start at one time every day: 'CRON_TZ=<zone> <minute> <hour> * * *'.")
    return schedule


def parse_zone(name: str) -> ZoneInfo:
    # ZoneInfo also reads paths and odd keys; only names of the IANA database are time zones here.
    if name not in zone_names():
        raise ScheduleError(f"Unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'.")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"Unknown time zone {name!r}.") from exc


_ZONES: frozenset[str] | None = None


def zone_names() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones()) | {"UTC"}
    return _ZONES


def _field(text: str, low: int, high: int, label: str, names: tuple[str, ...] = ()) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        values |= _part(part, low, high, label, names)
    return frozenset(values)


def _part(part: str, low: int, high: int, label: str, names: tuple[str, ...]) -> set[int]:
    span, _, step_text = part.partition("/")
    step = 1
    if step_text:
        if not step_text.isdecimal() or int(step_text) == 0:
            raise ScheduleError(f"Bad step {step_text!r} in the {label} field.")
        step = int(step_text)
    if span == "*":
        first, last = low, high
    elif "-" in span:
        start, _, end = span.partition("-")
        first, last = _number(start, low, high, label, names), _number(end, low, high, label, names)
        if first > last:
            raise ScheduleError(f"The range {span!r} in the {label} field runs backwards.")
    else:
        first = last = _number(span, low, high, label, names)
        if step_text:
            last = high
    return set(range(first, last + 1, step))


def _number(text: str, low: int, high: int, label: str, names: tuple[str, ...]) -> int:
    if text in names:
        return names.index(text)
    if not text.isdecimal() or not text.isascii():
        raise ScheduleError(f"{text!r} is not a valid {label}.")
    value = int(text)
    if not low <= value <= high:
        raise ScheduleError(f"The {label} {value} is outside {low}-{high}.")
    return value


def weekdays_from_mask(mask: int) -> list[str]:
    return [name for bit, name in enumerate(WEEKDAYS) if mask & (1 << bit)]


def mask_from_weekdays(names: list[str]) -> int:
    """``["monday", "friday"]`` as a template stores it; raise :class:`ScheduleError` naming an unknown day."""
    mask = 0
    for name in names:
        key = name.strip().lower()
        if key not in WEEKDAYS:
            raise ScheduleError(f"Unknown day {name!r}: use monday … sunday.")
        mask |= 1 << WEEKDAYS.index(key)
    return mask
