"""The insights rollup: a maintenance task that recomputes the recent UTC days (today and yesterday) of every
template from builds, agents and the connection log, and walks back through older days in bounded steps while the
rollups do not yet reach the oldest data (a new deployment, or one upgraded with history). Recomputing a day
replaces its rows, so running it twice changes nothing; only the workspace-status snapshot is kept once its day is
over (it is the state of the day it was taken, which cannot be asked again)."""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import delete, func, insert, literal, or_, select, text
from sqlalchemy.exc import IntegrityError

from app.catalog.models import Template
from app.connectionlog.models import TYPE_WORKSPACE_APP, VIA_HTTP, ConnectionLog
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.insights import histograms
from app.insights.models import (
    ALL_TEMPLATES,
    KIND_APP,
    KIND_BUILTIN,
    TemplateAppDaily,
    TemplateAppMonthly,
    TemplateUsageDaily,
    TemplateUserDaily,
    TemplateUserMonthly,
    month_of,
    next_month,
)
from app.provisioning.models import FAILED, SUCCEEDED, ProvisionerJob
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import status_for
from protocol.provisionerd import JOB_WORKSPACE_BUILD

log = logging.getLogger("slipway.insights")
DAY = timedelta(days=1)
# Days of history rolled up per maintenance pass while the rollups do not reach the oldest data: a year of history
# is caught up in a dozen passes, each a few range queries, and the loop's other tasks wait for none of them long.
BACKFILL_DAYS = 31
# The recent days are recomputed this often (the page says "refreshed every few minutes"), not on every pass.
RECENT_EVERY = timedelta(minutes=5)
RECENT_CLAIM_KEY = "slipway:insights:recent"
# The PostgreSQL transaction-level advisory lock a rollup holds while it replaces days and months: two passes
# (replicas, or the backfill beside the recent days) would otherwise each rewrite a month from the days they saw.
ROLLUP_LOCK_KEY = 0x736C_6970_0038
# What the built-in ways in are called in the rollups (Coder's builtin app slugs).
BUILTIN_SLUGS = {"ssh": "ssh", "reconnecting_pty": "reconnecting-pty", "port_forwarding": "port-forwarding"}


@dataclass
class DayUsage:
    """What one template saw on one day, gathered before it is written."""

    builds: int = 0
    succeeded: int = 0
    failed: int = 0
    build_seconds: list[float] = field(default_factory=list)
    ready_seconds: list[float] = field(default_factory=list)
    user_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # user id -> the UTC hours of the day they were connected in, as bits (TemplateUserDaily.active_hours)
    user_hours: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (kind, slug) -> [sessions, seconds]
    apps: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))


Usage = dict[tuple[str, date], DayUsage]


def percentile(values: list[float], share: float) -> float | None:
    """Nearest rank: the smallest value with at least ``share`` of the values at or below it (a value that some
    build really took, which is what a person checks a chart against)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def roll_up_insights(settings: Settings, now: datetime | None = None) -> int:
    """A maintenance task (the loop runs every few seconds): the recent days at most every RECENT_EVERY, one replica
    of several doing it (a Redis claim); older days not yet rolled up on every pass, BACKFILL_DAYS at a time. Returns
    how many days it recomputed."""
    due = bool(get_redis().set(RECENT_CLAIM_KEY, b"1", nx=True, ex=int(RECENT_EVERY.total_seconds())))
    return roll_up(now or utcnow(), recent=due)


def roll_up(now: datetime, *, recent: bool = True) -> int:
    """Recompute today and yesterday (``recent``), and BACKFILL_DAYS more of the past while the rollups do not reach
    back to the oldest build or connection. Returns how many days it recomputed."""
    today = now.date()
    spans = [(today - DAY, today)] if recent else []
    backfill = _backfill_span(today - DAY)
    if backfill is not None:
        spans.append(backfill)
    try:
        for first, last in spans:
            roll_up_days(first, last, now)
    except IntegrityError:
        # Another replica's pass wrote the same new day first; its rows are the same numbers.
        db.session.rollback()
        log.info("insights rollup: another replica rolled up the same days")
    return sum((last - first).days + 1 for first, last in spans)


def _backfill_span(recent_start: date) -> tuple[date, date] | None:
    """The next older days to roll up: up to BACKFILL_DAYS before the oldest rolled-up day (or the recent days),
    none before the oldest build or connection."""
    oldest_rolled = db.session.scalar(select(func.min(TemplateUsageDaily.day)))
    before = min(oldest_rolled, recent_start) if oldest_rolled is not None else recent_start
    starts = [
        db.session.scalar(
            select(func.min(ProvisionerJob.created_at)).where(ProvisionerJob.type == JOB_WORKSPACE_BUILD)
        ),
        db.session.scalar(select(func.min(ConnectionLog.connect_time))),
    ]
    oldest_data = min((start.date() for start in starts if start is not None), default=None)
    if oldest_data is None or oldest_data >= before:
        return None
    return max(oldest_data, before - BACKFILL_DAYS * DAY), before - DAY


def roll_up_days(first: date, last: date, now: datetime) -> None:
    """Replace the rollups of the days ``first`` to ``last`` (inclusive), of every template, and of the months they
    fall in, in one transaction."""
    _lock()
    start, end = _midnight(first), _midnight(last + DAY)
    usage: Usage = defaultdict(DayUsage)
    _add_builds(usage, start, end)
    _add_ready_times(usage, start, end)
    _add_connections(usage, start, min(end, now), now)
    snapshot = _workspaces_by_status() if first <= now.date() <= last else {}
    templates = db.session.scalars(select(Template.id)).all()
    existing = {
        (row.template_id, row.day): row
        for row in db.session.scalars(
            select(TemplateUsageDaily).where(TemplateUsageDaily.day >= first, TemplateUsageDaily.day <= last)
        )
    }
    db.session.execute(delete(TemplateUserDaily).where(TemplateUserDaily.day >= first, TemplateUserDaily.day <= last))
    db.session.execute(delete(TemplateAppDaily).where(TemplateAppDaily.day >= first, TemplateAppDaily.day <= last))
    deployment = _deployment_usage(usage)
    snapshot[ALL_TEMPLATES] = _summed(snapshot.values())
    for day in _days(first, last):
        usage[(ALL_TEMPLATES, day)] = deployment.get(day, DayUsage())
        for template_id in [*templates, ALL_TEMPLATES]:
            day_usage = usage.get((template_id, day), DayUsage())
            row = existing.get((template_id, day))
            if row is None:
                row = TemplateUsageDaily(template_id=template_id, day=day, workspaces_by_status="{}")
                db.session.add(row)
            statuses = json.dumps(snapshot.get(template_id, {}), sort_keys=True) if day == now.date() else None
            _fill(row, day_usage, statuses, now)
            if template_id == ALL_TEMPLATES:
                continue  # people and apps are read from the templates' rows
            db.session.add_all(
                TemplateUserDaily(
                    template_id=template_id,
                    day=day,
                    user_id=user_id,
                    seconds=round(seconds),
                    active_hours=day_usage.user_hours[user_id],
                )
                for user_id, seconds in day_usage.user_seconds.items()
            )
            db.session.add_all(
                TemplateAppDaily(
                    template_id=template_id,
                    day=day,
                    kind=kind,
                    slug=slug,
                    sessions=int(sessions),
                    seconds=round(seconds),
                )
                for (kind, slug), (sessions, seconds) in day_usage.apps.items()
            )
    rewrite_months(first, last)
    db.session.commit()


def _lock() -> None:
    """Wait for any other rollup's transaction to end (PostgreSQL; SQLite has a single writer anyway)."""
    if db.session.get_bind().dialect.name == "postgresql":
        db.session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ROLLUP_LOCK_KEY})


def rewrite_months(first: date, last: date) -> None:
    """Replace the monthly people and app rows of the months that the days ``first`` to ``last`` fall in by the sums
    of their daily rows (as they stand in this transaction), so that a month always equals its days."""
    db.session.flush()
    month = month_of(first)
    while month <= last:
        following = next_month(month)
        db.session.execute(delete(TemplateUserMonthly).where(TemplateUserMonthly.month == month))
        db.session.execute(delete(TemplateAppMonthly).where(TemplateAppMonthly.month == month))
        people, apps = TemplateUserDaily, TemplateAppDaily
        db.session.execute(
            insert(TemplateUserMonthly).from_select(
                ["template_id", "month", "user_id", "seconds", "days"],
                select(people.template_id, literal(month), people.user_id, func.sum(people.seconds), func.count())
                .where(people.day >= month, people.day < following)
                .group_by(people.template_id, people.user_id),
            )
        )
        db.session.execute(
            insert(TemplateAppMonthly).from_select(
                ["template_id", "month", "kind", "slug", "sessions", "seconds"],
                select(apps.template_id, literal(month), apps.kind, apps.slug, func.sum(apps.sessions),
                       func.sum(apps.seconds))
                .where(apps.day >= month, apps.day < following)
                .group_by(apps.template_id, apps.kind, apps.slug),
            )
        )  # fmt: skip
        month = following


def _deployment_usage(usage: Usage) -> dict[date, DayUsage]:
    """Each day's usage of all templates at once: people counted once however many templates they used."""
    days: dict[date, DayUsage] = defaultdict(DayUsage)
    for (_, day), part in usage.items():
        whole = days[day]
        whole.builds += part.builds
        whole.succeeded += part.succeeded
        whole.failed += part.failed
        whole.build_seconds += part.build_seconds
        whole.ready_seconds += part.ready_seconds
        for user_id, seconds in part.user_seconds.items():
            whole.user_seconds[user_id] += seconds
            whole.user_hours[user_id] |= part.user_hours[user_id]
    return days


def _summed(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for part in counts:
        for status, count in part.items():
            total[status] += count
    return dict(total)


def _fill(row: TemplateUsageDaily, usage: DayUsage, statuses: str | None, now: datetime) -> None:
    """Set the row's figures; ``computed_at`` moves only when one of them changed (a pass that finds nothing new
    writes nothing)."""
    figures = {
        "active_users": len(usage.user_seconds),
        "builds": usage.builds,
        "builds_succeeded": usage.succeeded,
        "builds_failed": usage.failed,
        "build_p50_seconds": percentile(usage.build_seconds, 0.5),
        "build_p95_seconds": percentile(usage.build_seconds, 0.95),
        "ready_p50_seconds": percentile(usage.ready_seconds, 0.5),
        "ready_p95_seconds": percentile(usage.ready_seconds, 0.95),
        "build_histogram": histograms.encode(usage.build_seconds),
        "ready_histogram": histograms.encode(usage.ready_seconds),
        "workspaces_by_status": row.workspaces_by_status if statuses is None else statuses,
    }
    if all(getattr(row, name) == value for name, value in figures.items()) and row.computed_at is not None:
        return
    for name, value in figures.items():
        setattr(row, name, value)
    row.computed_at = now


def _add_builds(usage: Usage, start: datetime, end: datetime) -> None:
    """Builds by the day they were queued (read through the jobs' created_at index); a succeeded build's duration
    is its job's run, from the daemon picking it up to its end."""
    rows = db.session.execute(
        select(Workspace.template_id, ProvisionerJob.created_at, ProvisionerJob.started_at,
               ProvisionerJob.completed_at, ProvisionerJob.status)
        .join(WorkspaceBuild, WorkspaceBuild.job_id == ProvisionerJob.id)
        .join(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
        .where(ProvisionerJob.type == JOB_WORKSPACE_BUILD, ProvisionerJob.created_at >= start,
               ProvisionerJob.created_at < end)
    )  # fmt: skip
    for template_id, created_at, started_at, completed_at, status in rows:
        day = usage[(template_id, created_at.date())]
        day.builds += 1
        if status == FAILED:
            day.failed += 1
        elif status == SUCCEEDED:
            day.succeeded += 1
            if started_at is not None and completed_at is not None:
                day.build_seconds.append((completed_at - started_at).total_seconds())


def _add_ready_times(usage: Usage, start: datetime, end: datetime) -> None:
    """Time to ready of the succeeded starts queued in the span: from the build's queueing to its last agent's
    ready time, when every agent of the build became ready."""
    rows = db.session.execute(
        select(Workspace.template_id, ProvisionerJob.id, ProvisionerJob.created_at, WorkspaceAgent.ready_at)
        .join(WorkspaceBuild, WorkspaceBuild.job_id == ProvisionerJob.id)
        .join(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
        .join(WorkspaceResource, WorkspaceResource.job_id == ProvisionerJob.id)
        .join(WorkspaceAgent, WorkspaceAgent.resource_id == WorkspaceResource.id)
        .where(ProvisionerJob.type == JOB_WORKSPACE_BUILD, ProvisionerJob.created_at >= start,
               ProvisionerJob.created_at < end, WorkspaceBuild.transition == "start",
               ProvisionerJob.status_in([SUCCEEDED]))
    )  # fmt: skip
    builds: dict[str, tuple[str, datetime, list[datetime | None]]] = {}
    for template_id, job_id, created_at, ready_at in rows:
        builds.setdefault(job_id, (template_id, created_at, []))[2].append(ready_at)
    for template_id, created_at, ready in builds.values():
        if all(at is not None for at in ready):
            last = max(at for at in ready if at is not None)
            usage[(template_id, created_at.date())].ready_seconds.append((last - created_at).total_seconds())


def _add_connections(usage: Usage, start: datetime, end: datetime, now: datetime) -> None:
    """Each session's time on each day it overlaps: for people (active users, seconds per person) and per way in.
    An open tunnel counts until now; an open app session until its last request."""
    rows = db.session.execute(
        select(ConnectionLog.template_id, ConnectionLog.user_id, ConnectionLog.type, ConnectionLog.via,
               ConnectionLog.slug_or_port, ConnectionLog.connect_time, ConnectionLog.disconnect_time,
               ConnectionLog.last_seen_at)
        # Each arm reads an index (connect_time, disconnect_time), so that the recent days never scan the whole log.
        .where(ConnectionLog.connect_time < end,
               or_(ConnectionLog.connect_time >= start, ConnectionLog.disconnect_time >= start,
                   ConnectionLog.disconnect_time.is_(None)))
    )  # fmt: skip
    for template_id, user_id, kind, via, slug_or_port, began, ended, last_seen in rows:
        if ended is None:
            ended = last_seen if via == VIA_HTTP else now
        app = (KIND_APP, slug_or_port) if kind == TYPE_WORKSPACE_APP else (KIND_BUILTIN, BUILTIN_SLUGS.get(kind, kind))
        for day in _days(max(began, start).date(), min(max(ended, began), end - timedelta(microseconds=1)).date()):
            since, until = max(began, _midnight(day)), min(ended, _midnight(day + DAY))
            seconds = max((until - since).total_seconds(), 0.0)
            day_usage = usage[(template_id, day)]
            if user_id is not None:
                day_usage.user_seconds[user_id] += seconds
                day_usage.user_hours[user_id] |= hours_between(since, until)
            counts = day_usage.apps[app]
            counts[0] += began.date() == day  # a session is counted on the day it began
            counts[1] += seconds


def hours_between(since: datetime, until: datetime) -> int:
    """The UTC hours of ``since``'s day that [since, until) touches, as bits (hour n is bit n); a session of no
    length touches the hour it began in. ``until`` is at most the next midnight."""
    first = since.hour
    last = first if until <= since else (until - timedelta(microseconds=1)).hour
    return (1 << (last + 1)) - (1 << first)


def _workspaces_by_status() -> dict[str, dict[str, int]]:
    """Template id -> workspace status -> count, now: one grouped query over the latest builds."""
    latest = (
        select(Workspace.template_id, WorkspaceBuild.transition, ProvisionerJob.status.label("job_status"))
        .join(WorkspaceBuild, WorkspaceBuild.id == Workspace.latest_build_id)
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(Workspace.deleted.is_(False))
        .subquery()
    )
    # Grouped outside: PostgreSQL cannot group by the status CASE itself (its literals are separate parameters).
    rows = db.session.execute(
        select(latest.c.template_id, latest.c.transition, latest.c.job_status, func.count()).group_by(
            latest.c.template_id, latest.c.transition, latest.c.job_status
        )
    )
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for template_id, transition, job_status, count in rows:
        status = status_for(job_status, transition)
        counts[template_id][status] = counts[template_id].get(status, 0) + int(count)
    return counts


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _days(first: date, last: date) -> Iterable[date]:
    return (first + n * DAY for n in range((last - first).days + 1))
