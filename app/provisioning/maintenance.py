"""The maintenance loop `slipway server` runs: the reaper (jobs that stopped reporting) and the reconciler
(pending jobs whose queue entry vanished, e.g. after a Redis restart)."""

from __future__ import annotations

import logging
from datetime import timedelta

from redis import Redis
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from sqlalchemy import select

from app.columns import utcnow
from app.config import Settings
from app.extensions import db
from app.provisioning.daemons import _reaper_notice, finish_job
from app.provisioning.jobs import dispatch
from app.provisioning.models import ProvisionerJob
from app.redis_client import get_redis

log = logging.getLogger(__name__)
# A job just created may not be in Redis yet (its request commits, then enqueues): leave it alone a while.
RECONCILE_GRACE = timedelta(seconds=5)


def reap_jobs(settings: Settings) -> int:
    """Fail running jobs silent for the hang timeout, and pending jobs older than the pending timeout."""
    now = utcnow()
    hung = select(ProvisionerJob).where(
        ProvisionerJob.started_at.is_not(None),
        ProvisionerJob.completed_at.is_(None),
        ProvisionerJob.updated_at < now - timedelta(seconds=settings.provisioner_hang_timeout),
    )
    stale = select(ProvisionerJob).where(
        ProvisionerJob.started_at.is_(None),
        ProvisionerJob.completed_at.is_(None),
        ProvisionerJob.created_at < now - timedelta(seconds=settings.provisioner_pending_timeout),
    )
    reaped = 0
    for job in db.session.scalars(hung).all():
        minutes = max(settings.provisioner_hang_timeout // 60, 1)
        reason = f"The build was hung: its provisioner daemon sent nothing for {minutes} minute(s). It was ended."
        _reaper_notice(job, reason)
        finish_job(job, error=reason)
        reaped += 1
    for job in db.session.scalars(stale).all():
        minutes = max(settings.provisioner_pending_timeout // 60, 1)
        reason = f"No provisioner daemon took this job within {minutes} minute(s). It was ended."
        _reaper_notice(job, reason)
        job.started_at = utcnow()
        finish_job(job, error=reason)
        reaped += 1
    return reaped


def reconcile_queues() -> int:
    """Re-enqueue pending jobs that Redis no longer holds; the database is the truth about what is pending."""
    pending = db.session.scalars(
        select(ProvisionerJob).where(
            ProvisionerJob.started_at.is_(None),
            ProvisionerJob.completed_at.is_(None),
            ProvisionerJob.canceled_at.is_(None),
            ProvisionerJob.created_at < utcnow() - RECONCILE_GRACE,
        )
    ).all()
    restored = 0
    connection = get_redis()
    for job in pending:
        if not _waiting_in_redis(job.id, connection):
            dispatch(job)
            restored += 1
    if restored:
        log.warning("re-enqueued %d pending provisioner job(s) missing from Redis", restored)
    return restored


def _waiting_in_redis(job_id: str, connection: Redis) -> bool:
    """Queued or being picked up; an entry that ended (a daemon died before acquiring) counts as missing."""
    try:
        status = Job.fetch(job_id, connection=connection, serializer=JSONSerializer).get_status(refresh=False)
    except NoSuchJobError:
        return False
    return status in (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED)


def run_maintenance(settings: Settings) -> None:
    try:
        reap_jobs(settings)
        reconcile_queues()
    finally:
        db.session.remove()
