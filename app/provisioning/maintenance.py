"""The maintenance loop `slipway server` runs: the reaper (jobs that stopped reporting) and the reconciler
(pending jobs whose queue entry vanished, e.g. after a Redis restart), then the clean-ups other features add
(freeing template archives nothing needs: ``app/catalog/storage.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta

from flask import Flask, current_app
from redis import Redis
from rq.job import Job, JobStatus
from sqlalchemy import select

from app.audit.recorder import Actor, acting_as
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.provisioning.daemons import add_notice, finish_job
from app.provisioning.jobs import dispatch_many
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from app.provisioning.retention import trim_old_logs

log = logging.getLogger(__name__)
# A job just created may not be in Redis yet (its request commits, then enqueues): leave it alone a while.
RECONCILE_GRACE = timedelta(seconds=5)
CANCEL_MARGIN = timedelta(seconds=60)
# The RQ states of an entry a daemon will still pick up (or is picking up).
WAITING = (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED)
FORGET_DAEMONS_AFTER = timedelta(days=7)
EXTENSION_KEY = "slipway_maintenance_tasks"
# Whom the audit log names for what the loop changes (a workspace's activity, pruned entries).
MAINTENANCE = Actor("system", None, "maintenance")

MaintenanceTask = Callable[[Settings], object]


def init_app(app: Flask, tasks: Sequence[MaintenanceTask]) -> None:
    """Clean-ups of features above this one, run by each maintenance pass after the job reaper's own."""
    app.extensions[EXTENSION_KEY] = list(tasks)


def reap_jobs(settings: Settings) -> int:
    """Fail running jobs silent for the hang timeout, canceled jobs that never stopped, and pending jobs older
    than the pending timeout; each gets a notice in its log. A build keeps the state it started from.

    Each job is ended by a conditional UPDATE that repeats the reason's condition, so a job the daemon reported on
    (or finished) after it was picked here is left alone — several replicas may run this loop at once."""
    now = utcnow()
    hung = (
        ProvisionerJob.started_at.is_not(None),
        ProvisionerJob.awaiting_confirmation_at.is_(None),  # waiting for a person, not for a daemon
        ProvisionerJob.updated_at < now - timedelta(seconds=settings.provisioner_hang_timeout),
    )
    # The daemon kills Terraform at the force-cancel interval; past it (and a margin), the daemon is not coping.
    stuck = (
        ProvisionerJob.started_at.is_not(None),
        ProvisionerJob.canceled_at
        < now - timedelta(seconds=settings.provisioner_force_cancel_interval) - CANCEL_MARGIN,
    )
    # updated_at: when it became pending (its creation, or a person's confirmation of its plan).
    stale = (
        ProvisionerJob.started_at.is_(None),
        ProvisionerJob.updated_at < now - timedelta(seconds=settings.provisioner_pending_timeout),
    )
    hang, force, pending = (
        _minutes(seconds)
        for seconds in (
            settings.provisioner_hang_timeout,
            settings.provisioner_force_cancel_interval,
            settings.provisioner_pending_timeout,
        )
    )
    reasons = [
        (hung, f"The build was hung: its provisioner daemon sent nothing for {hang}. It was ended."),
        (stuck, f"Cancel timed out: the job did not stop within {force} of being canceled."),
        (stale, f"No provisioner daemon took this job within {pending}. It was ended."),
    ]
    reaped = 0
    for conditions, reason in reasons:
        query = select(ProvisionerJob).where(ProvisionerJob.completed_at.is_(None), *conditions)
        for job in db.session.scalars(query).all():
            add_notice(job, reason)
            if finish_job(job, error=reason, still=conditions):
                reaped += 1
    return reaped


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} minute(s)" if seconds >= 60 else f"{seconds} second(s)"


def reconcile_queues() -> int:
    """Re-enqueue pending jobs that Redis no longer holds; the database is the truth about what is pending. One
    query and one Redis round trip, however many jobs wait."""
    pending = db.session.execute(
        select(ProvisionerJob.id, ProvisionerJob.queue).where(
            ProvisionerJob.waiting(),
            ProvisionerJob.created_at < utcnow() - RECONCILE_GRACE,
        )
    ).all()
    if not pending:
        return 0
    waiting = _waiting_in_redis([job_id for job_id, _ in pending], get_redis())
    missing = [(job_id, queue) for job_id, queue in pending if job_id not in waiting]
    if missing:
        dispatch_many(missing)
        log.warning("re-enqueued %d pending provisioner job(s) missing from Redis", len(missing))
    return len(missing)


def _waiting_in_redis(job_ids: Sequence[str], connection: Redis) -> set[str]:
    """The jobs whose RQ entry is queued or being picked up; an entry that ended (a daemon died before acquiring)
    or is gone counts as missing."""
    pipeline = connection.pipeline(transaction=False)
    for job_id in job_ids:
        pipeline.hget(Job.key_for(job_id), "status")
    statuses = pipeline.execute()
    alive = {status.value.encode() for status in WAITING}
    return {job_id for job_id, status in zip(job_ids, statuses, strict=True) if status in alive}


def forget_daemons() -> int:
    """Drop daemons silent for a week (Coder does the same): hosts come and go, the list should not grow forever.
    Their jobs stay; they only lose the link to the daemon that ran them."""
    stale = db.session.scalars(
        select(ProvisionerDaemon).where(ProvisionerDaemon.last_seen_at < utcnow() - FORGET_DAEMONS_AFTER)
    ).all()
    for daemon in stale:
        db.session.delete(daemon)
    db.session.commit()
    return len(stale)


def run_maintenance(settings: Settings) -> None:
    tasks: list[MaintenanceTask] = current_app.extensions.get(EXTENSION_KEY, [])
    try:
        with acting_as(MAINTENANCE):
            reap_jobs(settings)
            reconcile_queues()
            forget_daemons()
            trim_old_logs(settings)
            for task in tasks:
                task(settings)
    finally:
        db.session.remove()
