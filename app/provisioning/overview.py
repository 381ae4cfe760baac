"""What admins see of provisioning: daemons with their status and jobs, and jobs with their place in the queue.

Shared by the API (API.md "Provisioners"), the Provisioners page and the metrics endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.orm import aliased

from app.core.columns import rfc3339
from app.core.errors import InvalidInput, NotFound
from app.core.extensions import db
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.provisioning.jobs import JobSubject, describe_job, describe_jobs
from app.provisioning.keys import BUILTIN_KEY_NAME, PSK_KEY_NAME, USER_KEY_NAME
from app.provisioning.models import (
    CANCELING,
    JOB_STATUSES,
    PENDING,
    RUNNING,
    ProvisionerDaemon,
    ProvisionerJob,
    ProvisionerKey,
)
from app.provisioning.presenter import worker_names
from app.provisioning.queue import QueueInfo, queue_infos, untagged_rule
from app.users.models import User
from protocol.codec import JsonObject
from protocol.tags import TagError, daemon_can_run, normalise_tags

IDLE, BUSY, OFFLINE = "idle", "busy", "offline"
DAEMON_STATUSES = (IDLE, BUSY, OFFLINE)
MAX_JOBS_LISTED = 500
Selected = TypeVar("Selected")


@dataclass(frozen=True)
class JobSummary:
    """A daemon's current or previous job, as its row shows it."""

    id: str
    type: str
    status: str
    subject: JobSubject

    def to_json(self) -> JsonObject:
        return {"id": self.id, "type": self.type, "status": self.status, "title": self.subject.title}


@dataclass(frozen=True)
class DaemonView:
    daemon: ProvisionerDaemon
    status: str
    key_name: str
    current_job: JobSummary | None
    previous_job: JobSummary | None

    def to_json(self) -> JsonObject:
        daemon = self.daemon
        return {
            "id": daemon.id,
            "organization_id": daemon.organization_id,
            "name": daemon.name,
            "tags": daemon.tags,
            "version": daemon.version,
            "ephemeral": daemon.ephemeral,
            "terraform": {"binary": daemon.terraform_binary, "version": daemon.terraform_version},
            "status": self.status,
            "created_at": rfc3339(daemon.created_at),
            "last_seen_at": rfc3339(daemon.last_seen_at),
            "key_name": self.key_name,
            "current_job": self.current_job.to_json() if self.current_job else None,
            "previous_job": self.previous_job.to_json() if self.previous_job else None,
        }


@dataclass(frozen=True)
class JobView:
    job: ProvisionerJob
    queue: QueueInfo
    subject: JobSubject
    worker_name: str

    def to_json(self) -> JsonObject:
        return self.job.to_json(
            queue_position=self.queue.position,
            queue_size=self.queue.size,
            available_workers=self.queue.available,
            waiting_for_terraform=self.queue.needs_terraform,
            worker_name=self.worker_name,
            metadata=self.subject.to_json(),
        )


def key_name(daemon: ProvisionerDaemon, keys: dict[str, str]) -> str:
    if daemon.auth == "key":
        return keys.get(daemon.key_id or "", "(deleted key)")
    return {"builtin": BUILTIN_KEY_NAME, "psk": PSK_KEY_NAME}.get(daemon.auth, USER_KEY_NAME)


def daemons_serving(
    job_tags: Mapping[str, str], user_id: str, status: str | None = None,
    organization_id: str = DEFAULT_ORGANIZATION_ID,
) -> list[DaemonView]:  # fmt: skip
    """The daemons that would take a job of ``organization_id`` with ``job_tags`` (as a template or build of
    ``user_id`` would carry them, normalised the same way): what `templates push` and the upload form tell before
    anything is queued."""
    try:
        tags = normalise_tags(job_tags, user_id)
    except TagError as exc:
        raise InvalidInput(str(exc), validations=[{"field": "tags", "detail": str(exc)}]) from None
    rule = untagged_rule()
    return [
        view
        for view in daemon_views(status)
        if view.daemon.organization_id == organization_id and daemon_can_run(view.daemon.tags, tags, rule)
    ]


def daemons_query(
    status: str | None = None, organization_ids: Sequence[str] | None = None
) -> Select[ProvisionerDaemon]:
    """Daemons newest first (then by id, so that pages never overlap), of one status if asked: offline once silent
    for 90 s, else busy while it holds an unfinished job. ``organization_ids``: only theirs (None: every one)."""
    if status is not None and status not in DAEMON_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(DAEMON_STATUSES)}.")
    query = select(ProvisionerDaemon).order_by(ProvisionerDaemon.created_at.desc(), ProvisionerDaemon.id.desc())
    if organization_ids is not None:
        query = query.where(ProvisionerDaemon.organization_id.in_(organization_ids))
    if status is None:
        return query
    online = ProvisionerDaemon.online()
    holding = (
        select(ProvisionerJob.id)
        .where(ProvisionerJob.worker_id == ProvisionerDaemon.id, ProvisionerJob.completed_at.is_(None))
        .exists()
    )
    return query.where({OFFLINE: ~online, BUSY: online & holding, IDLE: online & ~holding}[status])


def daemon_views(status: str | None = None) -> list[DaemonView]:
    """Every daemon (of ``status``), as ``daemons_query`` lists them."""
    return views_of_daemons(db.session.scalars(daemons_query(status)).all())


def views_of_daemons(daemons: Sequence[ProvisionerDaemon]) -> list[DaemonView]:
    """Each daemon with its status and jobs, in four queries however many: their keys, the jobs they hold, the jobs
    they last finished, and what those jobs are about."""
    ids = [daemon.id for daemon in daemons]
    keys = {key_id: name for key_id, name in db.session.execute(select(ProvisionerKey.id, ProvisionerKey.name))}
    unfinished = db.session.scalars(
        select(ProvisionerJob).where(ProvisionerJob.worker_id.in_(ids), ProvisionerJob.completed_at.is_(None))
    ).all()
    # Each daemon's most recently finished job: one probe of the (worker_id, completed_at) index per daemon, however
    # long the job history.
    finished_job = aliased(ProvisionerJob)
    latest_finished = (
        select(finished_job.id)
        .where(finished_job.worker_id == ProvisionerDaemon.id, finished_job.completed_at.is_not(None))
        .order_by(finished_job.completed_at.desc())
        .limit(1)
        .correlate(ProvisionerDaemon)
        .scalar_subquery()
    )
    of_these = select(latest_finished).select_from(ProvisionerDaemon).where(ProvisionerDaemon.id.in_(ids))
    finished = db.session.scalars(select(ProvisionerJob).where(ProvisionerJob.id.in_(of_these))).all()
    subjects = describe_jobs([*unfinished, *finished])

    def summary(job: ProvisionerJob | None) -> JobSummary | None:
        return None if job is None else JobSummary(job.id, job.type, job.status, subjects[job.id])

    current = {job.worker_id: job for job in unfinished}
    previous = {job.worker_id: job for job in finished}
    views = []
    for daemon in daemons:
        running = current.get(daemon.id)
        state = OFFLINE if not daemon.is_online else BUSY if running else IDLE
        views.append(
            DaemonView(daemon, state, key_name(daemon, keys), summary(running), summary(previous.get(daemon.id)))
        )
    return views


def parse_statuses(raw: Sequence[str]) -> list[str]:
    """``?status=a&status=b`` or ``?status=a,b``; an unknown status is a 400 that lists the valid ones."""
    statuses = [part.strip() for item in raw for part in item.split(",") if part.strip()]
    unknown = [status for status in statuses if status not in JOB_STATUSES]
    if unknown:
        raise InvalidInput(f"Unknown job status {unknown[0]!r}: use {', '.join(JOB_STATUSES)}.")
    return statuses


def job_views(
    statuses: Sequence[str] = (), limit: int = 50, offset: int = 0, organization_ids: Sequence[str] | None = None
) -> list[JobView]:
    """Jobs newest first (optionally of some statuses, of some organisations), each with its queue place and what
    it is about."""
    return views_of(db.session.scalars(jobs_query(statuses, limit, offset, organization_ids)).all())


def jobs_query(
    statuses: Sequence[str], limit: int, offset: int = 0, organization_ids: Sequence[str] | None = None
) -> Select[ProvisionerJob]:
    """A page of jobs newest first; a filter on active statuses is served by the index of unfinished jobs."""
    query = all_jobs_query(statuses, organization_ids)
    return query.limit(max(1, min(limit, MAX_JOBS_LISTED))).offset(max(0, offset))


def all_jobs_query(
    statuses: Sequence[str] = (), organization_ids: Sequence[str] | None = None
) -> Select[ProvisionerJob]:
    """Every job (of ``statuses``, when given) newest first: the jobs page pages through it."""
    query = select(ProvisionerJob).order_by(ProvisionerJob.created_at.desc(), ProvisionerJob.id.desc())
    return _of_statuses(query, statuses, organization_ids)


def jobs_count(statuses: Sequence[str] = (), organization_ids: Sequence[str] | None = None) -> int:
    """How many jobs ``jobs_query`` pages through (its X-Total-Count)."""
    return db.session.scalar(_of_statuses(select(func.count(ProvisionerJob.id)), statuses, organization_ids)) or 0


def _of_statuses(
    query: Select[Selected], statuses: Sequence[str], organization_ids: Sequence[str] | None = None
) -> Select[Selected]:
    if organization_ids is not None:
        query = query.where(ProvisionerJob.organization_id.in_(organization_ids))
    return query.where(ProvisionerJob.status_in(statuses)) if statuses else query


def views_of(jobs: Sequence[ProvisionerJob]) -> list[JobView]:
    """Each job with its queue place, what it is about and its daemon's name, in a fixed number of queries."""
    infos, subjects, names = queue_infos(jobs), describe_jobs(jobs), worker_names(jobs)
    return [JobView(job, infos[job.id], subjects[job.id], names.get(job.worker_id or "", "")) for job in jobs]


@dataclass(frozen=True)
class AdminJobs:
    """The Provisioners page's job sections."""

    # The first jobs daemons will take, in the order they will take them, and how many wait in all.
    pending: list[JobView]
    pending_total: int
    running: list[JobView]
    recent: list[JobView]

    def shown(self) -> list[JobView]:
        return [*self.pending, *self.running, *self.recent]


def admin_jobs(pending_shown: int = 25, recent: int = 20) -> AdminJobs:
    """The head of the queue, everything running, and the latest finished: a page that costs the same however long
    the queue grows (the jobs API lists the rest)."""
    pending = db.session.scalars(
        select(ProvisionerJob)
        .where(ProvisionerJob.status_in([PENDING]))
        .order_by(*ProvisionerJob.queue_order())
        .limit(pending_shown)
    ).all()
    running = db.session.scalars(
        select(ProvisionerJob)
        .where(ProvisionerJob.status_in([RUNNING, CANCELING]))
        .order_by(ProvisionerJob.created_at)
        .limit(MAX_JOBS_LISTED)
    ).all()
    finished = db.session.scalars(
        select(ProvisionerJob)
        .where(ProvisionerJob.completed_at.is_not(None))
        .order_by(ProvisionerJob.completed_at.desc())
        .limit(recent)
    ).all()
    views = {view.job.id: view for view in views_of([*pending, *running, *finished])}
    return AdminJobs(
        pending=[views[job.id] for job in pending],
        pending_total=jobs_count([PENDING]),
        running=[views[job.id] for job in running],
        recent=[views[job.id] for job in finished],
    )


def get_job_for(user: User, job_id: str) -> ProvisionerJob:
    """Admins see (and may cancel) every job; members only their own workspaces' builds. Others get 404."""
    job = db.session.get(ProvisionerJob, job_id)
    if job is None or not (
        user.is_template_admin or user.is_auditor or describe_job(job).workspace_owner_id == user.id
    ):
        raise NotFound("No such provisioner job.")
    return job
