"""Provisioner jobs as the rest of the server sees them: create and dispatch, cancel, read logs, describe.

Creating a job inserts its row, then (after commit, so the daemon can see the row) puts an RQ job whose only
argument is the job id on the queue of the job's tag set, and publishes a notice for daemons that wait over HTTP.
Redis only wakes a daemon; the database decides.

What a job *is about* (a template import, a workspace build) belongs to the feature that creates it: each job type
has :class:`JobHandlers`, wired in by ``create_app``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app
from rq import Queue
from rq.serializers import JSONSerializer
from sqlalchemy import Select, literal, select, tuple_, update

from app.audit.recorder import ACTION_WRITE, change, record
from app.core.columns import utcnow
from app.core.errors import InvalidInput
from app.core.extensions import db, rows_changed
from app.core.redis_client import get_redis
from app.events.notices import publish_job_notice, publish_job_queued
from app.provisioning.models import LogLine, ProvisionerJob, ProvisionerJobLog, queue_namespace
from protocol.codec import JsonObject
from protocol.provisionerd import RUN_JOB_FUNCTION, AcquiredJob, JobCompletion, JobFailure
from protocol.tags import PRIORITY_HIGH, queue_name

log = logging.getLogger(__name__)
EXTENSION_KEY = "slipway_job_handlers"
MAX_LOG_LINES_READ = 10_000
# What one API read answers without ?limit= (~150 KB of JSON); readers page on with ?after=<the last id>.
LOG_PAGE_LINES = 1_000


@dataclass(frozen=True)
class JobSubject:
    """What a job is about, for lists of jobs: a title, the page that shows it, whose workspace it builds."""

    title: str
    url: str = ""
    template_name: str = ""
    workspace_name: str = ""
    workspace_owner_id: str = ""

    def to_json(self) -> JsonObject:
        return {"title": self.title, "template_name": self.template_name, "workspace_name": self.workspace_name}


def _no_secrets(job: ProvisionerJob) -> list[str]:
    return []


def _nothing_on_failure(job: ProvisionerJob, failure: JobFailure) -> None:
    pass


def _nothing_late(job: ProvisionerJob, state: bytes) -> str:
    return ""


def _no_quota(job: ProvisionerJob, daily_cost: int) -> str:
    return ""


def _nothing_when_failed(job: ProvisionerJob) -> None:
    pass


def _by_type(jobs: Sequence[ProvisionerJob]) -> dict[str, JobSubject]:
    return {job.id: JobSubject(title=job.type) for job in jobs}


@dataclass(frozen=True)
class JobHandlers:
    """What a job type adds to the generic protocol: the daemon's payload, and what completion stores."""

    # The acquired job the daemon gets (its id, type, tags and access URL are filled in by the caller).
    payload: Callable[[ProvisionerJob, AcquiredJob], AcquiredJob]
    complete: Callable[[ProvisionerJob, JobCompletion], None]
    # The field of JobCompletion its completion must carry ("template_import", "workspace_build"): one without it is
    # refused (400) and the job left running, as a malformed body is, instead of failing a job that may have worked.
    result: str
    fail: Callable[[ProvisionerJob, JobFailure], None] = _nothing_on_failure
    # After a job ended failed, however it ended (the daemon, the reaper, a rejected completion; not a cancel),
    # committed: e.g. telling the person whose build it was.
    failed: Callable[[ProvisionerJob], None] = _nothing_when_failed
    # A result the daemon reported after the job had ended (the reaper failed it while the daemon was cut off):
    # keep what must not be lost (a build's Terraform state); returns what to say in the job's log ("": nothing).
    late: Callable[[ProvisionerJob, bytes], str] = _nothing_late
    # Between plan and apply, the daemon asks whether what the plan costs a day fits (builds under quotas):
    # "" lets it apply, anything else is why not.
    commit_quota: Callable[[ProvisionerJob, int], str] = _no_quota
    # Values that must never be stored in the job's log (masked before storage).
    secrets: Callable[[ProvisionerJob], list[str]] = _no_secrets
    # What each of some jobs of this type is about, read for all of them at once (lists show hundreds).
    describe: Callable[[Sequence[ProvisionerJob]], dict[str, JobSubject]] = _by_type


def init_app(app: Flask, handlers: dict[str, JobHandlers]) -> None:
    app.extensions[EXTENSION_KEY] = dict(handlers)


def handlers_for(job: ProvisionerJob) -> JobHandlers:
    handlers: dict[str, JobHandlers] = current_app.extensions[EXTENSION_KEY]
    return handlers[job.type]


def new_job(
    job_type: str, *, organization_id: str, file_id: str, initiator_id: str, tags: dict[str, str],
    job_input: JsonObject, priority: str = PRIORITY_HIGH, required_terraform: str | None = None,
) -> ProvisionerJob:  # fmt: skip
    """Add a pending job of ``organization_id`` (only its daemons run it) to the session; the caller commits and
    then calls :func:`dispatch`."""
    queue = queue_name(tags, priority, queue_namespace(organization_id))
    job = ProvisionerJob(
        type=job_type, organization_id=organization_id, file_id=file_id, initiator_id=initiator_id, tags=tags,
        queue=queue, input=job_input, priority=priority, required_terraform=required_terraform,
    )  # fmt: skip
    db.session.add(job)
    return job


def dispatch(job: ProvisionerJob) -> None:
    """Wake a daemon that can take the job. A failure here is not fatal: the reconciler re-enqueues pending jobs."""
    dispatch_many([(job.id, job.queue)])


def dispatch_many(jobs: Sequence[tuple[str, str]]) -> None:
    """:func:`dispatch` for many ``(job id, queue)`` at once (the lifecycle executor's tick, which notes them before
    its commit so that nothing is read back): one Redis round trip per queue."""
    by_queue: dict[str, list[str]] = {}
    for job_id, queue_name_ in jobs:
        by_queue.setdefault(queue_name_, []).append(job_id)
    for name, queued in by_queue.items():
        try:
            queue = Queue(name, connection=get_redis(), serializer=JSONSerializer)
            # The RQ job id is the job id: enqueuing twice (the reconciler) replaces rather than duplicates it.
            queue.enqueue_many(
                [
                    Queue.prepare_data(
                        RUN_JOB_FUNCTION, (job_id,), job_id=job_id, result_ttl=0, failure_ttl=3600, timeout=-1
                    )
                    for job_id in queued
                ]
            )
        except Exception:  # Redis down: the jobs stay pending in the database and are re-enqueued later
            log.warning("could not enqueue %d provisioner job(s) on %s; they will be re-enqueued", len(queued), name,
                        exc_info=True)  # fmt: skip
        publish_job_queued(name)


def describe_jobs(jobs: Sequence[ProvisionerJob]) -> dict[str, JobSubject]:
    """What each job is about, by id: one read per job type, however many jobs."""
    handlers: dict[str, JobHandlers] = current_app.extensions[EXTENSION_KEY]
    subjects: dict[str, JobSubject] = {}
    for job_type in {job.type for job in jobs}:
        of_type = [job for job in jobs if job.type == job_type]
        try:
            subjects.update(handlers[job_type].describe(of_type))
        except Exception:  # a list of jobs must render even when something about one of them is gone
            log.warning("could not describe %s jobs", job_type, exc_info=True)
    return {job.id: subjects.get(job.id) or JobSubject(title=job.type) for job in jobs}


def describe_job(job: ProvisionerJob) -> JobSubject:
    return describe_jobs([job])[job.id]


def cancel_job(job: ProvisionerJob) -> ProvisionerJob:
    """Cancel atomically against acquisition: a pending job (or one awaiting confirmation, which no daemon holds)
    ends canceled, a running one becomes canceling."""
    now = utcnow()
    not_running = (ProvisionerJob.started_at.is_(None)) | (ProvisionerJob.awaiting_confirmation_at.is_not(None))
    pending = db.session.execute(
        update(ProvisionerJob)
        .where(ProvisionerJob.id == job.id, not_running, ProvisionerJob.completed_at.is_(None))
        .values(canceled_at=now, completed_at=now, updated_at=now)
    )
    if rows_changed(pending) == 0:
        running = db.session.execute(
            update(ProvisionerJob)
            .where(
                ProvisionerJob.id == job.id,
                ProvisionerJob.completed_at.is_(None),
                ProvisionerJob.canceled_at.is_(None),
            )
            .values(canceled_at=now)
        )
        if rows_changed(running) == 0:
            db.session.rollback()
            db.session.refresh(job)
            raise InvalidInput(f"The job is already {job.status}; there is nothing to cancel.")
        record("provisioner_job", job.id, job.type, ACTION_WRITE, {"canceled_at": change(now)})
        db.session.commit()
    else:
        record("provisioner_job", job.id, job.type, ACTION_WRITE, {"canceled_at": change(now)})
        db.session.commit()
        publish_job_notice(job.id, end=True)
    db.session.refresh(job)
    return job


def confirm_job(job: ProvisionerJob) -> ProvisionerJob:
    """A person confirmed the plan the job waits on: it is pending again, for a daemon to apply that plan."""
    now = utcnow()
    confirmed = db.session.execute(
        update(ProvisionerJob)
        .where(
            ProvisionerJob.id == job.id,
            ProvisionerJob.awaiting_confirmation_at.is_not(None),
            ProvisionerJob.completed_at.is_(None),
            ProvisionerJob.canceled_at.is_(None),
        )
        .values(awaiting_confirmation_at=None, started_at=None, worker_id=None, updated_at=now)
    )
    if rows_changed(confirmed) != 1:
        db.session.rollback()
        db.session.refresh(job)
        raise InvalidInput(f"The build is {job.status}: there is no plan waiting for confirmation.")
    # Jobs are not audited as rows (their progress is no one's change); a person's confirmation is.
    record("provisioner_job", job.id, job.type, ACTION_WRITE, {"plan_confirmed": change(True)})
    db.session.commit()
    db.session.refresh(job)
    dispatch(job)
    publish_job_notice(job.id)
    return job


def job_logs(job_id: str, after: int = 0, limit: int = MAX_LOG_LINES_READ) -> list[LogLine]:
    return [LogLine(**row._asdict()) for row in db.session.execute(job_logs_query(job_id, after, limit))]


def job_logs_query(job_id: str, after: int, limit: int) -> Select[Any]:
    """One page of a job's log, read along the (job_id, id) index from the cursor, whatever other jobs logged.

    Said as a range of that index rather than ``job_id = :job AND id > :after ORDER BY id``: given the equality,
    PostgreSQL may walk the primary key instead, past every later job's lines, betting on meeting this job's soon
    (a long log written after 500,000 other lines took 143 ms that way). A range on both columns, ordered by both,
    is something only that index answers."""
    log = ProvisionerJobLog
    return (
        select(*LogLine.columns())
        .where(tuple_(log.job_id, log.id) > tuple_(literal(job_id), literal(after)), log.job_id <= job_id)
        .order_by(log.job_id, log.id)
        .limit(limit)
    )
