"""The prebuilds reconciler: every tick, read what the pools hold, plan (app/prebuilds/planning.py) and queue the
builds the plan calls for, at low priority (people's builds first).

One replica acts at a time: a Redis lock, as the lifecycle executor's (app/lifecycle/executor.py). The tick reads
its state in a fixed number of queries whatever the number of templates, presets and prebuilds: the templates with
an active version, their versions, the prebuilds with their latest builds, their agents' states, and the recent
prebuild builds of the active versions (for the backoff).
"""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from redis import Redis
from sqlalchemy import select

from app.audit.recorder import Actor, acting_as
from app.catalog.models import Template, TemplateVersion
from app.catalog.presets import preset_id
from app.core.columns import utcnow
from app.core.errors import DomainError
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.prebuilds.models import SETTINGS_ROW_ID, PrebuildsSettings
from app.prebuilds.planning import (
    BUILDING,
    DELETING,
    FAILED,
    READY,
    RUNNING,
    STOPPED,
    Action,
    Failures,
    Plan,
    PoolPolicy,
    Prebuild,
    PrebuildStatus,
    TemplateState,
    plan,
)
from app.provisioning.jobs import dispatch_many
from app.provisioning.models import ACTIVE_STATUSES, SUCCEEDED, ProvisionerJob
from app.provisioning.models import FAILED as JOB_FAILED
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.users.models import PREBUILDS_USER_ID, User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import latest_builds, queue_build, queue_prebuild
from protocol.provisionerd import Preset
from protocol.tags import PRIORITY_LOW

log = logging.getLogger("slipway.prebuilds")

LOCK_KEY = "slipway:prebuilds:lock"
LOCK_MILLISECONDS = 55_000
RECONCILER = Actor("system", None, "prebuilds-reconciler")
# At most this many prebuild builds (creates and deletes) of one template run at once.
MAX_IN_FLIGHT_PER_TEMPLATE = 3
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=30)
# How far back the backoff looks for failed prebuild builds.
FAILURE_WINDOW = timedelta(days=1)


@dataclass
class ReconcileReport:
    acted: bool = False
    plan: Plan = field(default_factory=Plan)
    queued: list[Action] = field(default_factory=list)
    skipped: list[tuple[Action, str]] = field(default_factory=list)


def run_tick(
    now: datetime | None = None, *, redis: Redis | None = None, max_in_flight: int = MAX_IN_FLIGHT_PER_TEMPLATE
) -> ReconcileReport:
    """One reconciliation (tests pass a clock of their own); nothing when another replica holds the lock."""
    now = now or utcnow()
    connection = redis or get_redis()
    token = secrets.token_hex(8)
    if not connection.set(LOCK_KEY, token, nx=True, px=LOCK_MILLISECONDS):
        return ReconcileReport()
    try:
        with acting_as(RECONCILER):
            return _reconcile(now, max_in_flight)
    finally:
        connection.eval(_RELEASE, 1, LOCK_KEY, token)


# Delete the lock only if it is still ours: one that expired under a slow tick may be another replica's by now.
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def current_plan(now: datetime | None = None, *, max_in_flight: int = MAX_IN_FLIGHT_PER_TEMPLATE) -> Plan:
    """What the pools hold and what a tick would do now (the template page and the metrics read the pools)."""
    states, _, _ = read_state()
    return plan(
        states, now or utcnow(), max_in_flight=max_in_flight, backoff_base=BACKOFF_BASE, backoff_max=BACKOFF_MAX
    )


def read_state() -> tuple[list[TemplateState], dict[str, Template], dict[str, TemplateVersion]]:
    templates = list(
        db.session.scalars(
            select(Template).where(Template.deleted_at.is_(None), Template.active_version_id.is_not(None))
        )
    )
    by_id = {template.id: template for template in templates}
    version_ids = [template.active_version_id for template in templates if template.active_version_id]
    versions = {v.id: v for v in db.session.scalars(select(TemplateVersion).where(TemplateVersion.id.in_(version_ids)))}
    workspaces = list(
        db.session.scalars(
            select(Workspace).where(Workspace.owner_id == PREBUILDS_USER_ID, Workspace.deleted.is_(False))
        )
    )
    builds = latest_builds(workspaces)
    ready = _ready_jobs([b.job_id for b in builds.values() if b.transition == "start" and b.job.status == SUCCEEDED])
    pools: dict[str, list[Prebuild]] = defaultdict(list)
    for workspace in workspaces:
        build = builds.get(workspace.id)
        if build is None:
            continue
        version = build.template_version
        preset = next(
            (p.name for p in version.presets if preset_id(version.id, p.name) == build.template_version_preset_id), None
        )
        pools[workspace.template_id].append(
            Prebuild(workspace.id, build.template_version_id, preset, _status(build, ready), workspace.created_at)
        )
    failures = _failures(versions)
    states = []
    for template_id in sorted(set(by_id) | set(pools)):
        template = by_id.get(template_id)
        active = versions.get(template.active_version_id or "") if template else None
        presets = active.presets if active else ()
        states.append(
            TemplateState(
                template_id,
                active.id if active else None,
                {p.name: p.desired_prebuild_instances or 0 for p in presets},
                pools.get(template_id, []),
                failures.get(active.id, {}) if active else {},
                {p.name: _policy(p) for p in presets if p.prebuild_ttl_seconds or p.prebuild_scheduling},
            )
        )
    return states, by_id, versions


def _policy(preset: Preset) -> PoolPolicy:
    ttl = timedelta(seconds=preset.prebuild_ttl_seconds) if preset.prebuild_ttl_seconds else None
    return PoolPolicy(ttl=ttl, scheduling=preset.prebuild_scheduling)


def _status(build: WorkspaceBuild, ready: set[str]) -> PrebuildStatus:
    status = build.job.status
    if build.transition == "delete":
        return DELETING if status in ACTIVE_STATUSES else FAILED
    if status in ACTIVE_STATUSES:
        return BUILDING
    if status != SUCCEEDED:
        return FAILED
    if build.transition == "stop":
        return STOPPED
    return READY if build.job_id in ready else RUNNING


def _ready_jobs(job_ids: list[str]) -> set[str]:
    """The start jobs whose every agent is ready (a workspace without agents is ready once built)."""
    if not job_ids:
        return set()
    rows = db.session.execute(
        select(WorkspaceResource.job_id, WorkspaceAgent.lifecycle_state)
        .join(WorkspaceAgent, WorkspaceAgent.resource_id == WorkspaceResource.id)
        .where(WorkspaceResource.job_id.in_(job_ids))
    )
    not_ready = set()
    for job_id, state in rows:
        if state != "ready":
            not_ready.add(job_id)
    return set(job_ids) - not_ready


def _failures(versions: dict[str, TemplateVersion]) -> dict[str, dict[str, Failures]]:
    """By active version, by preset name: the failed prebuild start builds since the preset's last success."""
    if not versions:
        return {}
    names = {(v.id, preset_id(v.id, p.name)): p.name for v in versions.values() for p in v.presets}
    rows = db.session.execute(
        select(
            WorkspaceBuild.template_version_id,
            WorkspaceBuild.template_version_preset_id,
            ProvisionerJob.status,
            ProvisionerJob.completed_at,
            ProvisionerJob.error,
        )
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(
            ProvisionerJob.initiator_id == PREBUILDS_USER_ID,
            WorkspaceBuild.transition == "start",
            WorkspaceBuild.template_version_id.in_(list(versions)),
            ProvisionerJob.status.in_((SUCCEEDED, JOB_FAILED)),
            ProvisionerJob.completed_at >= utcnow() - FAILURE_WINDOW,
        )
        .order_by(ProvisionerJob.completed_at.desc())
    )
    result: dict[str, dict[str, Failures]] = defaultdict(dict)
    settled: set[tuple[str, str]] = set()
    for version_id, wanted, status, finished, error in rows:
        completed_at = finished or utcnow()
        name = names.get((version_id, wanted or ""))
        if name is None or (version_id, name) in settled:
            continue
        if status == SUCCEEDED:
            settled.add((version_id, name))
            continue
        known = result[version_id].get(name)
        if known is None:
            result[version_id][name] = Failures(1, completed_at, (error or "the build failed")[:500])
        else:
            result[version_id][name] = Failures(known.count + 1, known.last_at, known.reason)
    return result


def _reconcile(now: datetime, max_in_flight: int) -> ReconcileReport:
    settings = db.session.get(PrebuildsSettings, SETTINGS_ROW_ID)
    if settings is not None and settings.reconciliation_paused:
        return ReconcileReport()
    states, templates, versions = read_state()
    report = ReconcileReport(acted=True)
    report.plan = plan(states, now, max_in_flight=max_in_flight, backoff_base=BACKOFF_BASE, backoff_max=BACKOFF_MAX)
    owner = db.session.get(User, PREBUILDS_USER_ID)
    if owner is None:  # a database older than migration 0048 cannot be: the server migrates first
        return report
    jobs: list[tuple[str, str]] = []
    for action in report.plan.actions:
        # Each action commits alone: a person's claim of a prebuild this tick meant to delete wins, and only that
        # action is skipped.
        try:
            job = _apply(action, owner, templates, versions)
            db.session.commit()
        except DomainError as error:
            db.session.rollback()
            report.skipped.append((action, error.message))
            continue
        jobs.append((job.id, job.queue))
        report.queued.append(action)
    dispatch_many(jobs)
    if report.queued or report.skipped:
        log.info("prebuilds tick: %d builds queued, %d skipped", len(report.queued), len(report.skipped))
    return report


def _apply(
    action: Action, owner: User, templates: dict[str, Template], versions: dict[str, TemplateVersion]
) -> ProvisionerJob:
    if action.kind == "create":
        version = versions[action.version_id]
        name = f"prebuild-{secrets.token_hex(4)}"
        return queue_prebuild(
            owner,
            templates[action.template_id],
            version,
            preset_id(version.id, str(action.preset_name)),
            name,
            priority=PRIORITY_LOW,
        )
    workspace = db.session.get(Workspace, action.workspace_id)
    if workspace is None or workspace.owner_id != PREBUILDS_USER_ID or workspace.deleted:
        raise DomainError("claimed or deleted since the tick read it")
    return queue_build(owner, workspace, "delete", {}, priority=PRIORITY_LOW)
