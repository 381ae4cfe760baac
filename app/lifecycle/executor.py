"""The lifecycle executor: once a minute, queue the builds schedules and templates call for (reference §2.4).

Each tick finds the workspaces that are due in a fixed number of queries (indexed columns, one read of the latest
builds), then queues one build per workspace with its ``reason``:

- ``autostop``: a running workspace whose build ``deadline`` passed;
- ``autostart`` (``autoupdate`` when the start moves it to the active version): a stopped workspace whose
  ``next_start_at`` passed, if its template allows autostart, its owner is not suspended and may still use it;
- ``failure_cleanup``: a workspace whose start failed ``failure_ttl_ms`` ago is stopped (once: a failed cleanup
  is a failed stop, which nothing retries);
- ``dormancy``: a workspace unused for ``time_til_dormant_ms`` is marked dormant and stopped if running;
- ``autodelete``: a dormant workspace whose ``deleting_at`` passed is deleted.

Several replicas may tick: a Redis lock with a fencing token, and a conditional UPDATE of the one
``lifecycle_ticks`` row committed with the builds, let exactly one act per minute. A missed minute (the server was
down) is caught up on the next tick, once: what is due is read from state, not from the minutes that passed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from redis import Redis
from sqlalchemy import ColumnElement, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload

from app.audit.recorder import Actor, acting_as
from app.catalog import access as template_access
from app.catalog.models import Template
from app.core.columns import utcnow
from app.core.errors import DomainError
from app.core.extensions import db, rows_changed
from app.core.redis_client import get_redis
from app.core.schedules import ScheduleError, parse_schedule
from app.lifecycle.models import LifecycleTick
from app.notifications import services as notifications
from app.provisioning.jobs import dispatch_many
from app.provisioning.models import FAILED, ProvisionerJob
from app.users.models import STATUS_ACTIVE, User
from app.workspaces.deadlines import deleting_at_for
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import build_status, latest_builds, queue_build, version_for_start

log = logging.getLogger("slipway.lifecycle")

LOCK_KEY = "slipway:lifecycle:lock"
FENCE_KEY = "slipway:lifecycle:fence"
# The lock outlives a slow tick; the fence, not the lock's expiry, is what keeps a late replica from acting.
LOCK_MILLISECONDS = 55_000
TICK_ROW_ID = 1
# Whom the audit log names for the builds and changes a tick makes.
LIFECYCLE_EXECUTOR = Actor("system", None, "lifecycle-executor")
# An autostart missed by more than this (the server was down) is skipped: starting at 3 pm what was meant for
# 9 am surprises more than it helps.
AUTOSTART_MISS_LIMIT = timedelta(hours=1)
WARNING_AHEAD = timedelta(hours=24)


@dataclass
class TickReport:
    acted: bool = False
    queued: list[tuple[str, str]] = field(default_factory=list)  # (workspace id, reason)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (workspace id, why)

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for _, reason in self.queued:
            counts[reason] = counts.get(reason, 0) + 1
        queued = ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items())) or "no builds"
        return f"lifecycle tick: {queued}; {len(self.skipped)} skipped"


@dataclass
class _Action:
    workspace: Workspace
    latest: WorkspaceBuild
    transition: str
    reason: str
    version_id: str | None = None


def run_tick(now: datetime | None = None, *, redis: Redis | None = None) -> TickReport:
    """One tick at ``now`` (tests pass a clock of their own). Does nothing when another replica has this minute."""
    now = now or utcnow()
    connection = redis or get_redis()
    token = _take_lock(connection)
    if token is None:
        return TickReport()
    try:
        with acting_as(LIFECYCLE_EXECUTOR):
            return _tick(now, token)
    finally:
        _release_lock(connection, token)


def _tick(now: datetime, token: int) -> TickReport:
    minute = now.replace(second=0, microsecond=0)
    if not _claim_minute(token, minute):
        db.session.rollback()
        return TickReport()
    db.session.commit()
    report = TickReport(acted=True)
    dispatch_many(_queue(now, token, report))
    if report.queued or report.skipped:
        log.info("%s", report.summary())
    return report


def _take_lock(connection: Redis) -> int | None:
    token = int(connection.incr(FENCE_KEY))
    if not connection.set(LOCK_KEY, token, nx=True, px=LOCK_MILLISECONDS):
        return None
    return token


# Delete the lock only if it is still ours: one that expired under a slow tick may be another replica's by now.
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def _release_lock(connection: Redis, token: int) -> None:
    connection.eval(_RELEASE, 1, LOCK_KEY, str(token))


def _claim_minute(token: int, minute: datetime) -> bool:
    """The conditional UPDATE that makes this replica the one acting on ``minute``. Every commit of the tick then
    checks the fence again (:func:`_still_holds`), so a replica that stalls past its lock cannot act on top of a
    newer one."""
    if db.session.get(LifecycleTick, TICK_ROW_ID) is None:
        db.session.add(LifecycleTick(id=TICK_ROW_ID, fence=0, tick_at=None))
        try:
            db.session.commit()
        except IntegrityError:  # another replica created it first
            db.session.rollback()
    claimed = db.session.execute(
        update(LifecycleTick)
        .where(
            LifecycleTick.id == TICK_ROW_ID,
            LifecycleTick.fence < token,
            (LifecycleTick.tick_at.is_(None)) | (LifecycleTick.tick_at < minute),
        )
        .values(fence=token, tick_at=minute)
        .execution_options(synchronize_session=False)
    )
    return rows_changed(claimed) == 1


def _still_holds(token: int) -> bool:
    held = db.session.execute(
        update(LifecycleTick)
        .where(LifecycleTick.id == TICK_ROW_ID, LifecycleTick.fence == token)
        .values(fence=token)
        .execution_options(synchronize_session=False)
    )
    return rows_changed(held) == 1


def _is_latest_build() -> ColumnElement[bool]:
    """The build (joined with its workspace) is its workspace's latest: earlier builds keep their deadlines and
    failures as history, and a tick must not read the whole history of every workspace."""
    return WorkspaceBuild.id == Workspace.latest_build_id


def _due_actions(now: datetime, report: TickReport) -> list[_Action]:
    live = (Workspace.deleted.is_(False),)
    options = (joinedload(Workspace.template), joinedload(Workspace.owner))
    stops = db.session.scalars(
        select(Workspace)
        .join(WorkspaceBuild, WorkspaceBuild.workspace_id == Workspace.id)
        .where(*live, WorkspaceBuild.deadline <= now, WorkspaceBuild.transition == "start", _is_latest_build())
        .options(*options)
    ).unique()
    starts = db.session.scalars(
        select(Workspace)
        .where(*live, Workspace.autostart_schedule.is_not(None), Workspace.dormant_at.is_(None))
        .where(Workspace.next_start_at.is_(None) | (Workspace.next_start_at <= now))
        .options(*options)
    ).unique()
    deletions = db.session.scalars(
        select(Workspace).where(*live, Workspace.deleting_at <= now + WARNING_AHEAD).options(*options)
    ).unique()
    failures = db.session.scalars(
        select(Workspace)
        .join(Template, Template.id == Workspace.template_id)
        .join(WorkspaceBuild, WorkspaceBuild.workspace_id == Workspace.id)
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(*live, Template.failure_ttl_ms > 0, WorkspaceBuild.transition == "start", _is_latest_build())
        .where(ProvisionerJob.status == FAILED, ProvisionerJob.completed_at > now - timedelta(days=31))
        .options(*options)
    ).unique()
    idle = _idle_workspaces(now)
    candidates: dict[str, Workspace] = {}
    for group in (stops, starts, deletions, failures, idle):
        for workspace in group:
            candidates[workspace.id] = workspace
    latest = latest_builds(list(candidates.values()), with_state=True)
    actions = []
    for workspace in candidates.values():
        build = latest.get(workspace.id)
        if build is None:
            continue
        if build.job.is_active:  # never a second build; a scheduled start that came meanwhile is used up
            _take_scheduled_start(workspace, now, report)
            continue
        action = _decide(workspace, build, now, report)
        if action is not None:
            actions.append(action)
    return actions


def _idle_workspaces(now: datetime) -> list[Workspace]:
    """Workspaces of templates with dormancy whose dormancy (or its 24 h warning) is due: one query per such
    template, however many workspaces there are."""
    templates = db.session.scalars(select(Template).where(Template.time_til_dormant_ms > 0)).all()
    found: list[Workspace] = []
    for template in templates:
        warn_before = now + WARNING_AHEAD - timedelta(milliseconds=template.time_til_dormant_ms)
        found.extend(
            db.session.scalars(
                select(Workspace)
                .where(
                    Workspace.template_id == template.id,
                    Workspace.deleted.is_(False),
                    Workspace.dormant_at.is_(None),
                    Workspace.last_used_at <= warn_before,
                )
                .options(joinedload(Workspace.template), joinedload(Workspace.owner))
            ).unique()
        )
    return found


def _decide(workspace: Workspace, build: WorkspaceBuild, now: datetime, report: TickReport) -> _Action | None:
    """What is due for one workspace (its latest build idle), the most pressing first; None when nothing is."""
    template, status = workspace.template, build.job.status
    started = build_status(build) == "running"
    # A scheduled start that came while the workspace was running (or busy, or dormant) is used up, not kept for
    # after the next stop: the schedule moves on whatever else happens.
    start_due = _take_scheduled_start(workspace, now, report)
    if workspace.deleting_at is not None and workspace.deleting_at <= now and workspace.dormant_at is not None:
        return _Action(workspace, build, "delete", "autodelete")
    if workspace.dormant_at is None and template.time_til_dormant_ms > 0:
        dormant_from = workspace.last_used_at + timedelta(milliseconds=template.time_til_dormant_ms)
        if dormant_from <= now:
            _make_dormant(workspace, now)
            if build.transition != "delete" and build_status(build) != "stopped":
                return _Action(workspace, build, "stop", "dormancy")
            return None
        _warn(workspace, notifications.DORMANCY_WARNING, f"dormancy:{workspace.id}:{dormant_from.isoformat()}",
              f"{workspace.name} will go dormant at {dormant_from:%Y-%m-%d %H:%M} UTC unless it is used")  # fmt: skip
    if workspace.deleting_at is not None and workspace.deleting_at - WARNING_AHEAD <= now:
        _warn(workspace, notifications.DELETION_WARNING, f"deletion:{workspace.id}:{workspace.deleting_at.isoformat()}",
              f"{workspace.name} will be deleted at {workspace.deleting_at:%Y-%m-%d %H:%M} UTC")  # fmt: skip
    if workspace.dormant_at is not None:
        return None
    if started and build.deadline is not None and build.deadline <= now:
        return _Action(workspace, build, "stop", "autostop")
    if build.transition == "start" and status == FAILED and template.failure_ttl_ms > 0:
        completed = build.job.completed_at
        if completed is not None and completed + timedelta(milliseconds=template.failure_ttl_ms) <= now:
            return _Action(workspace, build, "stop", "failure_cleanup")
    if start_due is not None:
        return _autostart(workspace, build, start_due, now, report)
    return None


def _take_scheduled_start(workspace: Workspace, now: datetime, report: TickReport) -> datetime | None:
    """The scheduled start that is due now (None if none), moving ``next_start_at`` to the one after."""
    if not workspace.autostart_schedule:
        return None
    try:
        schedule = parse_schedule(workspace.autostart_schedule)
    except ScheduleError as exc:  # checked when set; a zone the tz database lost since
        report.skipped.append((workspace.id, f"autostart schedule no longer reads: {exc}"))
        workspace.next_start_at = None
        return None
    due = workspace.next_start_at
    if due is None or due > now:
        if due is None:  # set by a path that did not compute it: from now on
            workspace.next_start_at = schedule.next_after(now)
        return None
    workspace.next_start_at = schedule.next_after(now)
    return due


def _autostart(
    workspace: Workspace, build: WorkspaceBuild, due: datetime, now: datetime, report: TickReport
) -> _Action | None:
    if build_status(build) != "stopped" or not workspace.template.allow_user_autostart:
        return None
    if workspace.owner.status != STATUS_ACTIVE:
        report.skipped.append((workspace.id, "autostart skipped: the owner is suspended"))
        return None
    if template_access.template_role(workspace.owner, workspace.template) is None:
        # As a person's own start is refused (app/catalog/access.py): the schedule lends no template permission.
        # One statement, and only for a workspace whose start is due.
        report.skipped.append(
            (workspace.id, f"autostart skipped: the owner may no longer use template {workspace.template.name}")
        )
        return None
    if now - due > AUTOSTART_MISS_LIMIT:
        log.warning(
            "autostart of %s/%s due at %s skipped: missed by more than %s (the server was not running)",
            workspace.owner.username, workspace.name, due.isoformat(), AUTOSTART_MISS_LIMIT,
        )  # fmt: skip
        report.skipped.append((workspace.id, "autostart missed by more than an hour"))
        return None
    version_id = version_for_start(workspace.owner, workspace, None)
    reason = "autoupdate" if version_id not in (None, build.template_version_id) else "autostart"
    return _Action(workspace, build, "start", reason, version_id)


def _make_dormant(workspace: Workspace, now: datetime) -> None:
    workspace.dormant_at = now
    workspace.deleting_at = deleting_at_for(workspace.template, now)
    when = f" It will be deleted at {workspace.deleting_at:%Y-%m-%d %H:%M} UTC." if workspace.deleting_at else ""
    notifications.notify(
        workspace.owner_id, notifications.WORKSPACE_DORMANT, title=f"{workspace.name} is dormant",
        body=f"{workspace.name} was unused too long and was stopped; activate it to use it again.{when}",
        link=f"/workspaces/{workspace.id}", workspace_id=workspace.id,
    )  # fmt: skip


def _warn(workspace: Workspace, event: str, key: str, title: str) -> None:
    notifications.notify(
        workspace.owner_id, event, title=title, link=f"/workspaces/{workspace.id}", workspace_id=workspace.id,
        dedupe_key=key[:128],
    )  # fmt: skip


_TOLD = {
    "autostop": (notifications.WORKSPACE_AUTOSTOPPED, "{name} is being stopped on schedule"),
    "autostart": (notifications.WORKSPACE_AUTOSTARTED, "{name} is being started on schedule"),
    "autoupdate": (notifications.WORKSPACE_AUTOUPDATED, "{name} is being started on the template's new version"),
    "autodelete": (notifications.WORKSPACE_DELETED, "{name} is being deleted: it was dormant too long"),
}


def _queue(now: datetime, token: int, report: TickReport) -> list[tuple[str, str]]:
    """Queue every due action in one transaction, fenced. A unique-number conflict (a person's click won a race)
    rolls it back; the tick then reads what is due again and commits workspace by workspace, so only the loser of
    each race is left out."""
    try:
        batch = [(job.id, job.queue) for job in _queue_each(_due_actions(now, report), report)]
        if not _still_holds(token):
            db.session.rollback()
            return []
        db.session.commit()
        return batch
    except IntegrityError:
        db.session.rollback()
    report.queued.clear()
    jobs: list[tuple[str, str]] = []
    for action in _due_actions(now, report):
        try:
            job = _queue_action(action, report)
            queued = None if job is None else (job.id, job.queue)
            if not _still_holds(token):
                db.session.rollback()
                return jobs
            db.session.commit()
        except IntegrityError:
            db.session.rollback()
            report.skipped.append((action.workspace.id, f"{action.reason}: a build of this workspace was just queued"))
            continue
        if queued is not None:
            jobs.append(queued)
    return jobs


def _queue_each(actions: Sequence[_Action], report: TickReport) -> list[ProvisionerJob]:
    jobs = []
    # Nothing is written until the commit: the builds, jobs and notifications go in one batch per table.
    with db.session.no_autoflush:
        for action in actions:
            job = _queue_action(action, report)
            if job is not None:
                jobs.append(job)
    return jobs


def _queue_action(action: _Action, report: TickReport) -> ProvisionerJob | None:
    workspace = action.workspace
    owner: User = workspace.owner
    try:
        job = queue_build(
            owner, workspace, action.transition, {}, action.version_id, reason=action.reason, previous=action.latest
        )
    except DomainError as exc:
        report.skipped.append((workspace.id, f"{action.reason}: {exc.message}"))
        if action.transition == "start":
            notifications.notify(
                owner.id, notifications.BUILD_FAILED, title=f"{workspace.name} could not be started on schedule",
                body=f"The {action.reason} build was not queued: {exc.message}", link=f"/workspaces/{workspace.id}",
                workspace_id=workspace.id,
            )  # fmt: skip
        return None
    report.queued.append((workspace.id, action.reason))
    told = _TOLD.get(action.reason)
    if told is not None:
        event, title = told
        notifications.notify(
            owner.id, event, title=title.format(name=workspace.name), link=f"/workspaces/{workspace.id}",
            workspace_id=workspace.id,
        )  # fmt: skip
    return job
