"""Cron schedules as Coder reads a ``coder_script``'s ``cron``: the provider checks them, the agent runs them.

Fields: second minute hour day-of-month month [day-of-week]. The day of the week may be left out, so a Unix-style
five-field expression parses too, seconds first ("0 22 * * *" is minute 22 of every hour, which the provider warns
about, as Coder's does). Each field takes ``*`` (or ``?``), numbers, names (JAN-DEC, SUN-SAT), ranges ``a-b``,
lists ``a,b`` and steps ``*/n`` or ``a-b/n``; day-of-week is 0-6 with 7 also Sunday. As in Vixie cron, when both
the day of the month and the day of the week are restricted (neither starts with ``*``), a day matching either
one matches. Also: ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``),
``@hourly``, and ``@every <duration>`` (Go's durations: ``90s``, ``1h30m``). Times are the agent's local time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

# (name, lowest, highest) for each field, in order.
FIELDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
NAMES = {
    "month": {name: number for number, name in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(), 1)},
    "day of week": {name: number for number, name in enumerate("SUN MON TUE WED THU FRI SAT".split())},
}
DESCRIPTORS = {
    "@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *", "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *", "@hourly": "0 0 * * * *",
}  # fmt: skip
EVERY = "@every "
GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
GO_DURATION = re.compile(f"(?:{GO_DURATION_PART.pattern})+")
GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# An expression such as "0 0 0 30 2 *" never matches; stop looking after this long.
SEARCH_LIMIT = timedelta(days=366 * 5)


class CronError(ValueError):
    """The expression is malformed; the message says which field and why."""


def _number(text: str, name: str, low: int, high: int) -> int:
    named = NAMES.get(name, {}).get(text.upper())
    if named is not None:
        return named
    if not text.isdigit():
        raise CronError(f"{name}: {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{name}: {value} is outside {low}-{high}")
    return value


def _parse_part(part: str, name: str, low: int, high: int) -> set[int]:
    range_text, slash, step_text = part.partition("/")
    step = _number(step_text, name, 1, high - low + 1) if slash else 1
    if range_text in ("*", "?"):
        start, end = low, high
    elif "-" in range_text:
        first, _, last = range_text.partition("-")
        start, end = _number(first, name, low, high), _number(last, name, low, high)
        if start > end:
            raise CronError(f"{name}: the range {range_text!r} runs backwards")
    else:
        start = _number(range_text, name, low, high)
        end = high if slash else start  # "5/10" means from 5 to the end, every 10
    return set(range(start, end + 1, step))


def parse_field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    if not text:
        raise CronError(f"{name}: empty")
    values: set[int] = set()
    for part in text.split(","):
        values |= _parse_part(part, name, low, high)
    return frozenset(values)


@dataclass(frozen=True)
class CronSchedule:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        """Fields or a descriptor (``@every`` is :func:`parse_schedule`'s)."""
        fields = DESCRIPTORS.get(expression.strip().lower(), expression).split()
        if len(fields) == len(FIELDS) - 1:
            fields.append("*")  # the day of the week is optional
        if len(fields) != len(FIELDS):
            raise CronError(
                f"{expression!r} has {len(fields)} fields; a cron schedule here has six, seconds first "
                "(e.g. '0 */5 * * * *'), the day of the week optional"
            )
        parsed = [parse_field(text, *spec) for text, spec in zip(fields, FIELDS, strict=True)]
        weekdays = frozenset(day % 7 for day in parsed[5])
        return cls(
            seconds=parsed[0],
            minutes=parsed[1],
            hours=parsed[2],
            days=parsed[3],
            months=parsed[4],
            weekdays=weekdays,
            days_restricted=not fields[3].startswith(("*", "?")),
            weekdays_restricted=not fields[5].startswith(("*", "?")),
        )

    def _day_matches(self, moment: datetime) -> bool:
        in_days = moment.day in self.days
        in_weekdays = (moment.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def matches_hour(self, moment: datetime) -> bool:
        """Whether ``moment``'s month, day and hour match, whatever its minute and second (a prebuild schedule,
        whose minute is always ``*``, covers whole hours)."""
        return moment.month in self.months and self._day_matches(moment) and moment.hour in self.hours

    def next_after(self, moment: datetime) -> datetime:
        """The first matching second strictly after ``moment``."""
        candidate = moment.replace(microsecond=0) + timedelta(seconds=1)
        limit = moment + SEARCH_LIMIT
        while candidate <= limit:
            if candidate.month not in self.months:
                month_start = candidate.replace(day=1, hour=0, minute=0, second=0)
                candidate = (month_start + timedelta(days=32)).replace(day=1)
            elif not self._day_matches(candidate):
                candidate = candidate.replace(hour=0, minute=0, second=0) + timedelta(days=1)
            elif candidate.hour not in self.hours:
                candidate = candidate.replace(minute=0, second=0) + timedelta(hours=1)
            elif candidate.minute not in self.minutes:
                candidate = candidate.replace(second=0) + timedelta(minutes=1)
            elif candidate.second not in self.seconds:
                candidate += timedelta(seconds=1)
            else:
                return candidate
        raise CronError("the schedule never matches a real date")


@dataclass(frozen=True)
class IntervalSchedule:
    """``@every <duration>``: runs that far apart, the first that far from when the schedule starts."""

    every: timedelta

    def next_after(self, moment: datetime) -> datetime:
        return moment.replace(microsecond=0) + self.every


def parse_schedule(expression: str) -> CronSchedule | IntervalSchedule:
    """A ``coder_script`` cron as Coder's agent reads it; a CronError says what is wrong."""
    if expression.strip().lower().startswith(EVERY):
        duration = expression.strip()[len(EVERY) :].strip()
        if not GO_DURATION.fullmatch(duration):
            raise CronError(f"@every: {duration!r} is not a duration (e.g. '90s', '5m', '1h30m')")
        seconds = sum(float(amount) * GO_UNITS[unit] for amount, unit in GO_DURATION_PART.findall(duration))
        # Rounded down to whole seconds, at least one (Go's cron does the same).
        return IntervalSchedule(timedelta(seconds=max(1, int(seconds))))
    return CronSchedule.parse(expression)


def unix_format_warning(expression: str) -> str:
    """Coder's warning for a five-field expression valid as Unix cron, which runs seconds first here ("" if
    none)."""
    fields = expression.split()
    if len(fields) != len(FIELDS) - 1:
        return ""
    try:
        for text, spec in zip(fields, FIELDS[1:], strict=True):
            parse_field(text, *spec)
    except CronError:
        return ""
    return (
        f"The cron expression '{expression}' appears to be in Unix 5-field format. Coder uses 6-field format "
        f"(seconds minutes hours day month day-of-week). Consider prefixing with '0 ' to run at the start of each "
        f"minute: '0 {expression}'"
    )
