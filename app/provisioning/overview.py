"""What admins see of provisioning: daemons with their status and jobs, and jobs with their place in the queue.

Shared by the API (API.md "Provisioners"), the Provisioners page and the metrics endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from app.columns import rfc3339
from app.errors import InvalidInput, NotFound
from app.extensions import db
from app.provisioning.jobs import JobSubject, describe_job
from app.provisioning.keys import BUILTIN_KEY_NAME, PSK_KEY_NAME, USER_KEY_NAME
from app.provisioning.models import (
    ACTIVE_STATUSES,
    CANCELED,
    CANCELING,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    ProvisionerDaemon,
    ProvisionerJob,
    ProvisionerKey,
)
from app.provisioning.queue import QueueInfo, queue_infos
from app.users.models import User

JOB_STATUSES = (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELING, CANCELED)
IDLE, BUSY, OFFLINE = "idle", "busy", "offline"
DAEMON_STATUSES = (IDLE, BUSY, OFFLINE)
MAX_JOBS_LISTED = 500


@dataclass(frozen=True)
class DaemonView:
    daemon: ProvisionerDaemon
    status: str
    key_name: str
    current_job: ProvisionerJob | None
    previous_job: ProvisionerJob | None

    def to_json(self) -> dict[str, Any]:
        daemon = self.daemon
        return {
            "id": daemon.id,
            "name": daemon.name,
            "tags": daemon.tags,
            "version": daemon.version,
            "status": self.status,
            "created_at": rfc3339(daemon.created_at),
            "last_seen_at": rfc3339(daemon.last_seen_at),
            "key_name": self.key_name,
            "current_job": _job_summary(self.current_job),
            "previous_job": _job_summary(self.previous_job),
        }


@dataclass(frozen=True)
class JobView:
    job: ProvisionerJob
    queue: QueueInfo
    subject: JobSubject
    worker_name: str

    def to_json(self) -> dict[str, Any]:
        return self.job.to_json(
            queue_position=self.queue.position,
            queue_size=self.queue.size,
            available_workers=self.queue.available,
            worker_name=self.worker_name,
            metadata={
                "title": self.subject.title,
                "template_name": self.subject.template_name,
                "workspace_name": self.subject.workspace_name,
            },
        )


def _job_summary(job: ProvisionerJob | None) -> dict[str, Any] | None:
    if job is None:
        return None
    return {"id": job.id, "type": job.type, "status": job.status, "title": describe_job(job).title}


def key_name(daemon: ProvisionerDaemon, keys: dict[str, str]) -> str:
    if daemon.auth == "key":
        return keys.get(daemon.key_id or "", "(deleted key)")
    return {"builtin": BUILTIN_KEY_NAME, "psk": PSK_KEY_NAME}.get(daemon.auth, USER_KEY_NAME)


def daemon_views(status: str | None = None) -> list[DaemonView]:
    """Every daemon, newest first: offline once silent for 90 s, else busy while it holds an unfinished job."""
    if status is not None and status not in DAEMON_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(DAEMON_STATUSES)}.")
    daemons = db.session.scalars(select(ProvisionerDaemon).order_by(ProvisionerDaemon.created_at.desc())).all()
    keys = dict(db.session.execute(select(ProvisionerKey.id, ProvisionerKey.name)).all())
    unfinished = db.session.scalars(
        select(ProvisionerJob).where(ProvisionerJob.worker_id.is_not(None), ProvisionerJob.completed_at.is_(None))
    ).all()
    current = {job.worker_id: job for job in unfinished}
    views = []
    for daemon in daemons:
        previous = db.session.scalar(
            select(ProvisionerJob)
            .where(ProvisionerJob.worker_id == daemon.id, ProvisionerJob.completed_at.is_not(None))
            .order_by(ProvisionerJob.completed_at.desc())
            .limit(1)
        )
        running = current.get(daemon.id)
        state = OFFLINE if not daemon.is_online else BUSY if running else IDLE
        views.append(DaemonView(daemon, state, key_name(daemon, keys), running, previous))
    return [view for view in views if status is None or view.status == status]


def parse_statuses(raw: Sequence[str]) -> list[str]:
    """``?status=a&status=b`` or ``?status=a,b``; an unknown status is a 400 that lists the valid ones."""
    statuses = [part.strip() for item in raw for part in item.split(",") if part.strip()]
    unknown = [status for status in statuses if status not in JOB_STATUSES]
    if unknown:
        raise InvalidInput(f"Unknown job status {unknown[0]!r}: use {', '.join(JOB_STATUSES)}.")
    return statuses


def job_views(statuses: Sequence[str] = (), limit: int = 50) -> list[JobView]:
    """Jobs newest first (optionally of some statuses), each with its queue place and what it is about."""
    query = select(ProvisionerJob).order_by(ProvisionerJob.created_at.desc(), ProvisionerJob.id.desc())
    if statuses:
        query = query.where(ProvisionerJob.status.in_(statuses))
    jobs = db.session.scalars(query.limit(max(1, min(limit, MAX_JOBS_LISTED)))).all()
    return views_of(jobs)


def views_of(jobs: Sequence[ProvisionerJob]) -> list[JobView]:
    infos = queue_infos(jobs)
    worker_ids = {job.worker_id for job in jobs if job.worker_id}
    names = dict(
        db.session.execute(
            select(ProvisionerDaemon.id, ProvisionerDaemon.name).where(ProvisionerDaemon.id.in_(worker_ids))
        ).all()
    )
    return [JobView(job, infos[job.id], describe_job(job), names.get(job.worker_id or "", "")) for job in jobs]


def admin_jobs(recent: int = 20) -> dict[str, list[JobView]]:
    """The Provisioners page's job sections: everything waiting or running, and the latest finished."""
    active = db.session.scalars(
        select(ProvisionerJob)
        .where(ProvisionerJob.status.in_(ACTIVE_STATUSES))
        .order_by(ProvisionerJob.created_at)
        .limit(MAX_JOBS_LISTED)
    ).all()
    finished = db.session.scalars(
        select(ProvisionerJob)
        .where(ProvisionerJob.completed_at.is_not(None))
        .order_by(ProvisionerJob.completed_at.desc())
        .limit(recent)
    ).all()
    views = views_of([*active, *finished])
    return {
        "pending": [view for view in views if view.job.status == PENDING],
        "running": [view for view in views if view.job.status in (RUNNING, CANCELING)],
        "recent": [view for view in views if view.job.completed_at is not None],
    }


def get_job_for(user: User, job_id: str) -> ProvisionerJob:
    """Admins see (and may cancel) every job; members only their own workspaces' builds. Others get 404."""
    job = db.session.get(ProvisionerJob, job_id)
    if job is None or not (user.is_template_admin or describe_job(job).workspace_owner_id == user.id):
        raise NotFound("No such provisioner job.")
    return job
