"""Six-field cron expressions, seconds first (``0 */5 * * * *``), and the loop that runs cron scripts.

Fields: second minute hour day-of-month month day-of-week. Each takes ``*``, numbers, ranges ``a-b``, lists
``a,b`` and steps ``*/n`` or ``a-b/n``; day-of-week is 0-6 with 7 also Sunday. As in Vixie cron, when both the
day of the month and the day of the week are restricted (neither starts with ``*``), a day matching either
one matches. Times are the agent's local time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

log = logging.getLogger(__name__)

# (name, lowest, highest) for each field, in order.
FIELDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
# An expression such as "0 0 0 30 2 *" never matches; stop looking after this long.
SEARCH_LIMIT = timedelta(days=366 * 5)


class CronError(ValueError):
    """The expression is malformed; the message says which field and why."""


def _number(text: str, name: str, low: int, high: int) -> int:
    if not text.isdigit():
        raise CronError(f"{name}: {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{name}: {value} is outside {low}-{high}")
    return value


def _parse_part(part: str, name: str, low: int, high: int) -> set[int]:
    range_text, slash, step_text = part.partition("/")
    step = _number(step_text, name, 1, high - low + 1) if slash else 1
    if range_text == "*":
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
        fields = expression.split()
        if len(fields) != len(FIELDS):
            raise CronError(
                f"{expression!r} has {len(fields)} fields; a cron schedule here has six, seconds first "
                "(e.g. '0 */5 * * * *')"
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
            days_restricted=not fields[3].startswith("*"),
            weekdays_restricted=not fields[5].startswith("*"),
        )

    def _day_matches(self, moment: datetime) -> bool:
        in_days = moment.day in self.days
        in_weekdays = (moment.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays

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


async def run_on_schedule(
    schedule: CronSchedule,
    job: Callable[[], Awaitable[object]],
    *,
    now: Callable[[], datetime] = datetime.now,
) -> None:
    """Run ``job`` at each matching time until cancelled. A run still going at the next time makes that time
    pass unrun rather than overlap it."""
    last_run: datetime | None = None
    while True:
        current = now()
        # The clock may read a hair before the second just run (sleep and wall clock differ): never run it twice.
        target = schedule.next_after(max(current, last_run) if last_run else current)
        await asyncio.sleep(max((target - current).total_seconds(), 0))
        last_run = target
        await job()
