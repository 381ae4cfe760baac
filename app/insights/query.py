"""Reading the insights: who may see which templates, the query's range and filters, and the figures, each one
grouped query over the rollups (app/insights/rollup.py), whatever the number of builds and connections behind them.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, Date, Integer, Subquery, case, cast, func, literal, or_, select, union, union_all
from sqlalchemy.orm import InstrumentedAttribute

from app.catalog.access import administers_any, template_filter
from app.catalog.models import Template
from app.core.errors import Forbidden, InvalidInput
from app.core.extensions import db
from app.insights import histograms
from app.insights.models import (
    ALL_TEMPLATES,
    TemplateAppDaily,
    TemplateAppMonthly,
    TemplateUsageDaily,
    TemplateUserDaily,
    TemplateUserMonthly,
    month_of,
    next_month,
)
from app.organizations.models import ORG_READERS
from app.organizations.services import organizations_where
from app.users.models import User

DAY = timedelta(days=1)
HALF_DAY = timedelta(hours=12)
# Longest range asked at once: a year (a leap year's too).
MAX_RANGE = timedelta(days=366)
# Coder's tz_offset bounds (hours).
TZ_OFFSETS = range(-12, 15)
DAU_DAYS = 30
Interval = Literal["day", "week"]
INTERVAL_DAYS = {"day": 1, "week": 7}
BUILTIN_NAMES = {"ssh": "SSH", "reconnecting-pty": "Web terminal", "port-forwarding": "Port forwarding"}


@dataclass(frozen=True)
class DayRange:
    """The UTC days ``first`` to ``last`` (inclusive) that a request's ``start_time``/``end_time`` stand for."""

    start: datetime
    end: datetime
    first: date
    last: date

    @property
    def days(self) -> list[date]:
        return [self.first + n * DAY for n in range((self.last - self.first).days + 1)]


def visible_templates(user: User) -> list[str] | None:
    """The templates whose insights ``user`` may read: None for all (owners, auditors, template admins), else those
    their access lists let them administer; Forbidden for whoever administers none."""
    if user.is_template_admin or user.reads_everything:
        return None
    ids = list(db.session.scalars(select(Template.id).where(template_filter(user, "admin")).order_by(Template.id)))
    if not ids:
        raise Forbidden("Insights are for owners, auditors and the admins of a template.")
    return ids


def may_read_insights(user: User) -> bool:
    """Also an organisation's auditors: they read its templates' insights (through ``template_filter``)."""
    return user.reads_everything or administers_any(user) or bool(organizations_where(user.id, ORG_READERS))


def chosen_templates(visible: list[str] | None, asked: Sequence[str]) -> list[str] | None:
    """The templates a request reads: those it names (``template_ids``, comma-separated or repeated), each one
    ``visible``; without any, all that are visible (None: every template)."""
    ids = [part.strip() for value in asked for part in value.split(",") if part.strip()]
    bad = [value for value in ids if not _is_uuid(value)]
    if bad:
        raise InvalidInput(
            "Query parameters have invalid values.",
            validations=[{"field": "template_ids", "detail": f"Not a template id: {bad[0][:64]!r}."}],
        )
    if not ids:
        return visible
    hidden = [value for value in ids if visible is not None and value not in visible]
    if hidden:
        raise Forbidden(f"You do not administer template {hidden[0]}.")
    return sorted(set(ids))


def parse_range(start_text: str | None, end_text: str | None) -> DayRange:
    """Coder's rules for ``start_time`` and ``end_time`` (RFC 3339, with a zone, on the hour, start before end, a year
    at most). The rollups are UTC days: each end is taken to the nearest UTC midnight, so a range from local midnight
    to local midnight (any zone within ±12 h) reads the days it names."""
    start = _time_param("start_time", start_text)
    end = _time_param("end_time", end_text)
    if start >= end:
        raise _invalid("end_time", "end_time must be after start_time.")
    if end - start > MAX_RANGE:
        raise _invalid("end_time", "The range may be a year at most.")
    first = (start + HALF_DAY).astimezone(UTC).date()
    last = max((end + HALF_DAY).astimezone(UTC).date() - DAY, first)
    return DayRange(start, end, first, last)


def day_range(first: date, last: date) -> DayRange:
    """The range of whole UTC days ``first`` to ``last`` (the page's form)."""
    start = datetime.combine(first, time(), tzinfo=UTC)
    return DayRange(start, start + ((last - first).days + 1) * DAY, first, last)


def parse_interval(text: str | None) -> Interval:
    if text in (None, ""):
        return "day"
    if text not in INTERVAL_DAYS:
        raise _invalid("interval", 'Use "day" or "week".')
    return "week" if text == "week" else "day"


def parse_tz_offset(text: str | None) -> int:
    try:
        offset = int(text or "0")
    except ValueError:
        offset = TZ_OFFSETS.stop
    if offset not in TZ_OFFSETS:
        raise _invalid("tz_offset", "A whole number of hours from -12 to 14.")
    return offset


def daily_active_users(templates: list[str] | None, days: DayRange, tz_offset: int = 0) -> dict[date, int]:
    """Distinct people per day, over the templates (a person on two templates counts once): the deployment's rows
    say it for all of them. With ``tz_offset`` (hours east of UTC) the days are that zone's: each person's UTC day is
    split by the hours they were connected in (rows kept before the hours were count on their UTC day)."""
    if tz_offset:
        return _zoned_daily_active_users(templates, days, tz_offset)
    if templates is None:
        row = TemplateUsageDaily
        query = select(row.day, row.active_users).where(_in_range(row.day, days), *_usage_of(None))
        counts = {day: int(count) for day, count in db.session.execute(query)}
        return {day: counts.get(day, 0) for day in days.days}
    pairs = (
        select(TemplateUserDaily.day, TemplateUserDaily.user_id)
        .where(_in_range(TemplateUserDaily.day, days), *_of(TemplateUserDaily.template_id, templates))
        .distinct()
        .subquery()
    )
    # DISTINCT, then a count: PostgreSQL hashes the pairs, where COUNT(DISTINCT …) would sort them.
    query = select(pairs.c.day, func.count()).group_by(pairs.c.day)
    counts = {day: int(count) for day, count in db.session.execute(query)}
    return {day: counts.get(day, 0) for day in days.days}


def _zoned_daily_active_users(templates: list[str] | None, days: DayRange, tz_offset: int) -> dict[date, int]:
    """A UTC day's hours fall on two local days: for an offset east of UTC its last ``tz_offset`` hours are the
    next local day's, west of it its first ones are the day before's. Each (local day, person) pair once (UNION),
    then a count per local day; the UTC days read are the range's and one on the side the zone spills to."""
    row = TemplateUserDaily
    spill = 1 if tz_offset > 0 else -1
    whole_day = (1 << 24) - 1
    # The bits of the UTC hours that stay on their own local day, and of those that spill over.
    own = (1 << (24 - tz_offset)) - 1 if tz_offset > 0 else whole_day - ((1 << -tz_offset) - 1)
    spilled = whole_day - own
    scanned = day_range(min(days.first, days.first - spill * DAY), max(days.last, days.last - spill * DAY))
    where = [_in_range(row.day, scanned), *_of(row.template_id, templates)]
    stays = select(row.day.label("day"), row.user_id).where(
        *where, or_(row.active_hours == 0, row.active_hours.op("&")(own) != 0)
    )
    moves = select(_days_after(row.day, spill).label("day"), row.user_id).where(
        *where, row.active_hours.op("&")(spilled) != 0
    )
    pairs = union(stays, moves).subquery()
    query = select(pairs.c.day, func.count()).where(pairs.c.day.between(days.first, days.last)).group_by(pairs.c.day)
    counts = {_as_date(day): int(count) for day, count in db.session.execute(query)}
    return {day: counts.get(day, 0) for day in days.days}


def active_users(templates: list[str] | None, days: DayRange, interval: Interval | None = None) -> list[int]:
    """Distinct people over the whole range (no interval), or in each interval of it (the last one may be short)."""
    step = INTERVAL_DAYS[interval] if interval else (days.last - days.first).days + 1
    if step > (days.last - days.first).days:
        # One interval, the whole range: its whole months are read from the monthly rows.
        people = _people(templates, days)
        count = db.session.scalar(select(func.count()).select_from(select(people.c.user_id).distinct().subquery()))
        return [int(count or 0)]
    pairs = (
        select(_bucket(TemplateUserDaily.day, days.first, step).label("bucket"), TemplateUserDaily.user_id)
        .where(_in_range(TemplateUserDaily.day, days), *_of(TemplateUserDaily.template_id, templates))
        .distinct()
        .subquery()
    )
    query = select(pairs.c.bucket, func.count()).group_by(pairs.c.bucket)
    counts = {int(index): int(count) for index, count in db.session.execute(query)}
    return [counts.get(index, 0) for index in range(len(intervals(days, step)))]


def intervals(days: DayRange, step: int) -> list[tuple[date, date]]:
    """(first, last) day of each interval of ``step`` days, the last one cut at the range's end."""
    firsts = days.days[::step]
    return [(first, min(first + (step - 1) * DAY, days.last)) for first in firsts]


@dataclass(frozen=True)
class AppUsage:
    kind: str
    slug: str
    template_ids: list[str]
    sessions: int
    seconds: int

    @property
    def display_name(self) -> str:
        return BUILTIN_NAMES.get(self.slug, self.slug) if self.kind == "builtin" else self.slug


def app_usage(templates: list[str] | None, days: DayRange) -> list[AppUsage]:
    """Each way in over the range, most used first."""
    rows = _apps(templates, days)
    query = select(
        rows.c.kind, rows.c.slug, rows.c.template_id, func.sum(rows.c.sessions), func.sum(rows.c.seconds)
    ).group_by(rows.c.kind, rows.c.slug, rows.c.template_id)
    merged: dict[tuple[str, str], tuple[list[str], int, int]] = {}
    for kind, slug, template_id, sessions, seconds in db.session.execute(query):
        ids, total_sessions, total_seconds = merged.get((kind, slug), ([], 0, 0))
        merged[(kind, slug)] = ([*ids, template_id], total_sessions + int(sessions), total_seconds + int(seconds))
    usage = [AppUsage(kind, slug, sorted(ids), n, s) for (kind, slug), (ids, n, s) in merged.items()]
    return sorted(usage, key=lambda app: (-app.seconds, app.kind, app.slug))


@dataclass(frozen=True)
class UserActivity:
    user_id: str
    username: str
    template_ids: list[str]
    seconds: int


def user_activity(templates: list[str] | None, days: DayRange) -> list[UserActivity]:
    """Seconds each person spent in the templates' workspaces over the range, most first: one row per person out of
    the database. Summed per person and template first, then per person (two hashed groupings, no per-group sort),
    and named last (a join on the people found, not on every row)."""
    people = _people(templates, days)
    per_template = (
        select(people.c.user_id, people.c.template_id, func.sum(people.c.seconds).label("seconds"))
        .group_by(people.c.user_id, people.c.template_id)
        .subquery()
    )
    seconds = func.sum(per_template.c.seconds)
    query = (
        select(per_template.c.user_id, User.username, _gathered(per_template.c.template_id), seconds)
        .outerjoin(User, User.id == per_template.c.user_id)
        .group_by(per_template.c.user_id, User.username)
        .order_by(seconds.desc(), User.username)
    )
    return [
        UserActivity(user_id, username or "", sorted(_id_list(ids)), int(total))
        for user_id, username, ids, total in db.session.execute(query)
    ]


@dataclass(frozen=True)
class DayBuilds:
    day: date
    builds: int
    succeeded: int
    failed: int
    build_p50: float | None
    build_p95: float | None
    ready_p50: float | None
    ready_p95: float | None

    @property
    def success_rate(self) -> float | None:
        """Of the builds that ended either way (canceled and unfinished ones are neither)."""
        ended = self.succeeded + self.failed
        return self.succeeded / ended if ended else None


def daily_builds(templates: list[str] | None, days: DayRange) -> list[DayBuilds]:
    """Builds per day. For all templates (the deployment's rows) and for one, the p50 and p95 are exact; over
    several they come from the sum of the templates' histograms (within histograms.ACCURACY), and for a day rolled up
    before the histograms existed, from the templates' own weighted by their succeeded builds."""
    row = TemplateUsageDaily
    query = (
        select(row.day, func.sum(row.builds), func.sum(row.builds_succeeded), func.sum(row.builds_failed),
               *(_weighted(column, row.builds_succeeded) for column in
                 (row.build_p50_seconds, row.build_p95_seconds, row.ready_p50_seconds, row.ready_p95_seconds)))
        .where(_in_range(row.day, days), *_usage_of(templates))
        .group_by(row.day)
    )  # fmt: skip
    found = {
        values[0]: DayBuilds(values[0], *(int(n or 0) for n in values[1:4]), *(_float(v) for v in values[4:]))
        for values in db.session.execute(query)
    }
    if templates is not None and len(templates) > 1:
        for day, (build_p50, build_p95, ready_p50, ready_p95) in _summed_percentiles(templates, days).items():
            if day in found:
                found[day] = replace(
                    found[day], build_p50=build_p50, build_p95=build_p95, ready_p50=ready_p50, ready_p95=ready_p95
                )
    return [found.get(day) or DayBuilds(day, 0, 0, 0, None, None, None, None) for day in days.days]


Percentiles = tuple[float | None, float | None, float | None, float | None]


def _summed_percentiles(templates: list[str], days: DayRange) -> dict[date, Percentiles]:
    """Build and ready p50/p95 per day from the sum of the templates' histograms; only the days on which every row
    has them (a day rolled up before they existed keeps the weighted figures)."""
    row = TemplateUsageDaily
    query = select(row.day, row.build_histogram, row.ready_histogram).where(
        _in_range(row.day, days), _of(row.template_id, templates)[0]
    )
    builds: dict[date, Counter[int]] = defaultdict(Counter)
    ready: dict[date, Counter[int]] = defaultdict(Counter)
    incomplete: set[date] = set()
    for day, build_histogram, ready_histogram in db.session.execute(query):
        if build_histogram is None or ready_histogram is None:
            incomplete.add(day)
            continue
        histograms.add(builds[day], build_histogram)
        histograms.add(ready[day], ready_histogram)
    return {
        day: (
            histograms.percentile(builds[day], 0.5),
            histograms.percentile(builds[day], 0.95),
            histograms.percentile(ready[day], 0.5),
            histograms.percentile(ready[day], 0.95),
        )
        for day in builds.keys() - incomplete
    }


def workspaces_by_status(templates: list[str] | None, days: DayRange) -> tuple[date | None, dict[str, int]]:
    """The templates' workspaces by status on the range's last day that has a snapshot, and that day."""
    row = TemplateUsageDaily
    latest = db.session.scalar(
        select(func.max(row.day)).where(
            _in_range(row.day, days), row.workspaces_by_status != "{}", *_usage_of(templates)
        )
    )
    if latest is None:
        return None, {}
    totals: dict[str, int] = {}
    snapshots = db.session.scalars(select(row.workspaces_by_status).where(row.day == latest, *_usage_of(templates)))
    for snapshot in snapshots:
        for status, count in json.loads(snapshot).items():
            totals[status] = totals.get(status, 0) + int(count)
    return latest, dict(sorted(totals.items(), key=lambda item: (-item[1], item[0])))


def split_by_month(days: DayRange) -> tuple[list[tuple[date, date]], tuple[date, date] | None]:
    """The range as the day spans at its ends that are not whole months, and the whole months inside it (the first
    day of the first, the first day of the month after the last), None when it holds no whole month."""
    months_from = days.first if days.first.day == 1 else next_month(days.first)
    months_to = next_month(days.last) if (days.last + DAY).day == 1 else month_of(days.last)
    if months_from >= months_to:
        return [(days.first, days.last)], None
    edges = [(days.first, months_from - DAY), (months_to, days.last)]
    return [(first, last) for first, last in edges if first <= last], (months_from, months_to)


def _people(templates: list[str] | None, days: DayRange) -> Subquery:
    """(user_id, template_id, seconds) rows that add up to the range's people: the daily rows of its ends and the
    monthly rows of its whole months (a person a month rather than a person a day over a year)."""
    return _daily_and_monthly(
        TemplateUserDaily, TemplateUserMonthly, ("user_id", "template_id", "seconds"), templates, days
    )


def _apps(templates: list[str] | None, days: DayRange) -> Subquery:
    """(kind, slug, template_id, sessions, seconds) rows that add up to the range's app usage, as _people."""
    names = ("kind", "slug", "template_id", "sessions", "seconds")
    return _daily_and_monthly(TemplateAppDaily, TemplateAppMonthly, names, templates, days)


def _daily_and_monthly(
    daily: type[TemplateUserDaily | TemplateAppDaily],
    monthly: type[TemplateUserMonthly | TemplateAppMonthly],
    names: tuple[str, ...],
    templates: list[str] | None,
    days: DayRange,
) -> Subquery:
    """The columns ``names`` of ``daily``'s rows at the range's ends and of ``monthly``'s rows of its whole months."""
    edges, months = split_by_month(days)
    parts = [
        select(*(getattr(daily, name) for name in names)).where(
            daily.day.between(first, last), *_of(daily.template_id, templates)
        )
        for first, last in edges
    ]
    if months is not None:
        parts.append(
            select(*(getattr(monthly, name) for name in names)).where(
                monthly.month >= months[0], monthly.month < months[1], *_of(monthly.template_id, templates)
            )
        )
    return (parts[0] if len(parts) == 1 else union_all(*parts)).subquery()


def template_choices(visible: list[str] | None) -> list[tuple[str, str]]:
    """(id, name) of the templates a person may pick, by name."""
    query = select(Template.id, Template.name).order_by(Template.name)
    if visible is not None:
        query = query.where(Template.id.in_(visible))
    return [(template_id, name) for template_id, name in db.session.execute(query)]


def _gathered(column: ColumnElement[str]) -> ColumnElement[Any]:
    """A group's values: an array in PostgreSQL, a comma-separated string in SQLite."""
    if db.session.get_bind().dialect.name == "postgresql":
        return func.array_agg(column)
    return func.group_concat(column)


def _id_list(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split(",")
    return [str(item) for item in value] if isinstance(value, list) else []


def _weighted(
    column: InstrumentedAttribute[float | None], weight: InstrumentedAttribute[int]
) -> ColumnElement[float | None]:
    counted = case((column.is_not(None), weight), else_=0)
    return func.sum(column * weight) / func.nullif(func.sum(counted), 0)


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _of(column: InstrumentedAttribute[str], templates: list[str] | None) -> list[ColumnElement[bool]]:
    return [] if templates is None else [column.in_(templates)]


def _usage_of(templates: list[str] | None) -> list[ColumnElement[bool]]:
    """The daily usage rows of ``templates``; of all of them: the deployment's own row."""
    return (
        [TemplateUsageDaily.template_id == ALL_TEMPLATES]
        if templates is None
        else _of(TemplateUsageDaily.template_id, templates)
    )


def _in_range(column: InstrumentedAttribute[date], days: DayRange) -> ColumnElement[bool]:
    return column.between(days.first, days.last)


def _days_after(column: InstrumentedAttribute[date], count: int) -> ColumnElement[date]:
    """``column`` moved by ``count`` days, in SQL (PostgreSQL adds days to a date; SQLite's dates are text)."""
    if db.session.get_bind().dialect.name == "postgresql":
        return column + literal(count)
    return func.date(column, f"{count:+d} day", type_=Date)


def _as_date(value: object) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def _bucket(column: InstrumentedAttribute[date], first: date, step: int) -> ColumnElement[int]:
    """The number of the ``step``-day interval (from ``first``) a day falls in, in SQL (dates subtract differently
    in the two databases)."""
    if db.session.get_bind().dialect.name == "postgresql":
        days_in: ColumnElement[int] = column - literal(first)  # type: ignore[assignment]
    else:
        days_in = cast(func.julianday(column) - func.julianday(literal(first.isoformat())), Integer)
    return days_in // step if step > 1 else days_in


def _time_param(name: str, text: str | None) -> datetime:
    if not text:
        raise _invalid(name, f"{name} is required (RFC 3339, for example 2026-11-01T00:00:00Z).")
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise _invalid(name, f"{name} is not an RFC 3339 time: {text[:64]!r}.") from None
    if value.tzinfo is None:
        raise _invalid(name, f"{name} needs a time zone (Z or ±hh:mm).")
    if (value.minute, value.second, value.microsecond) != (0, 0, 0):
        raise _invalid(name, f"{name} must be on the hour (minutes and seconds 0).")
    return value


def _invalid(field: str, detail: str) -> InvalidInput:
    return InvalidInput("Query parameters have invalid values.", validations=[{"field": field, "detail": detail}])


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
