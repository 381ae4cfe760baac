"""Provisioner jobs as the rest of the server sees them: create and dispatch, cancel, read logs.

Creating a job inserts its row, then (after commit, so the daemon can see the row) puts an RQ job whose only
argument is the job id on the queue of the job's tag set. Redis only wakes a daemon; the database decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flask import Response, current_app, jsonify, request, stream_with_context
from rq import Queue
from rq.serializers import JSONSerializer
from sqlalchemy import select, update

from app.columns import utcnow
from app.errors import InvalidInput
from app.extensions import db
from app.limits import live_stream
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob, ProvisionerJobLog
from app.provisioning.tags import queue_name
from app.redis_client import get_redis

log = logging.getLogger(__name__)

# The one function a daemon's RQ worker will execute (workers/jobs.py); anything else is refused there.
RUN_JOB_FUNCTION = "workers.jobs.run_provisioner_job"
LOG_CHANNEL_PREFIX = "slipway:job-logs:"
# Notices that an agent changed (connection, lifecycle, logs, metadata, app health): streams re-read it.
AGENT_EVENTS_PREFIX = "slipway:agent-events:"
# Messages for an agent's control connection (dials), delivered by whichever process holds that connection.
AGENT_CONTROL_PREFIX = "slipway:agent-control:"


@dataclass(frozen=True)
class JobSubject:
    """What a job is about, for lists of jobs: a title, the page that shows it, whose workspace it builds."""

    title: str
    url: str = ""
    template_name: str = ""
    workspace_name: str = ""
    workspace_owner_id: str = ""


@dataclass(frozen=True)
class JobHandlers:
    """What a job type adds to the generic protocol: the daemon's payload, and what completion stores."""

    payload: Callable[[ProvisionerJob], dict[str, Any]]
    complete: Callable[[ProvisionerJob, dict[str, Any]], None]
    fail: Callable[[ProvisionerJob, dict[str, Any]], None] = lambda job, body: None
    # Values that must never be stored in the job's log (masked before storage).
    secrets: Callable[[ProvisionerJob], list[str]] = lambda job: []
    describe: Callable[[ProvisionerJob], JobSubject] = lambda job: JobSubject(title=job.type)


JOB_HANDLERS: dict[str, JobHandlers] = {}


def register_job_type(job_type: str, handlers: JobHandlers) -> None:
    JOB_HANDLERS[job_type] = handlers


def new_job(
    job_type: str, *, file_id: str, initiator_id: str, tags: dict[str, str], job_input: dict[str, Any]
) -> ProvisionerJob:
    """Add a pending job to the session; the caller commits and then calls :func:`dispatch`."""
    job = ProvisionerJob(type=job_type, file_id=file_id, initiator_id=initiator_id, tags=tags, input=job_input)
    db.session.add(job)
    return job


def dispatch(job: ProvisionerJob) -> None:
    """Wake a daemon that can take the job. A failure here is not fatal: the reconciler re-enqueues pending jobs."""
    try:
        queue = Queue(queue_name(job.tags), connection=get_redis(), serializer=JSONSerializer)
        # The RQ job id is the job id: enqueuing twice (the reconciler) replaces rather than duplicates it.
        queue.enqueue(RUN_JOB_FUNCTION, job.id, job_id=job.id, result_ttl=0, failure_ttl=3600, job_timeout=-1)
    except Exception:  # Redis down: the job stays pending in the database and is re-enqueued later
        log.warning("could not enqueue provisioner job %s; it will be re-enqueued", job.id, exc_info=True)


def job_json(job: ProvisionerJob) -> dict[str, Any]:
    """API.md's job object: the row plus its place in the queue and the name of the daemon running it."""
    from app.provisioning.queue import queue_info

    info = queue_info(job)
    worker = db.session.get(ProvisionerDaemon, job.worker_id) if job.worker_id else None
    return job.to_json(
        queue_position=info.position,
        queue_size=info.size,
        available_workers=info.available,
        worker_name=worker.name if worker else "",
    )


def describe_job(job: ProvisionerJob) -> JobSubject:
    try:
        return JOB_HANDLERS[job.type].describe(job)
    except Exception:  # a list of jobs must render even when one job's subject is gone
        log.warning("could not describe job %s", job.id, exc_info=True)
        return JobSubject(title=job.type)


def cancel_job(job: ProvisionerJob) -> ProvisionerJob:
    """Cancel atomically against acquisition: a pending job ends canceled, a running one becomes canceling."""
    now = utcnow()
    pending = db.session.execute(
        update(ProvisionerJob)
        .where(ProvisionerJob.id == job.id, ProvisionerJob.started_at.is_(None), ProvisionerJob.completed_at.is_(None))
        .values(canceled_at=now, completed_at=now, updated_at=now)
    )
    if pending.rowcount == 0:  # type: ignore[attr-defined]
        running = db.session.execute(
            update(ProvisionerJob)
            .where(
                ProvisionerJob.id == job.id,
                ProvisionerJob.completed_at.is_(None),
                ProvisionerJob.canceled_at.is_(None),
            )
            .values(canceled_at=now)
        )
        if running.rowcount == 0:  # type: ignore[attr-defined]
            db.session.rollback()
            db.session.refresh(job)
            raise InvalidInput(f"The job is already {job.status}; there is nothing to cancel.")
        db.session.commit()
    else:
        db.session.commit()
        publish_log_notice(job.id, end=True)
    db.session.refresh(job)
    return job


def job_logs(job_id: str, after: int = 0, limit: int = 10_000) -> list[ProvisionerJobLog]:
    query = (
        select(ProvisionerJobLog)
        .where(ProvisionerJobLog.job_id == job_id, ProvisionerJobLog.id > after)
        .order_by(ProvisionerJobLog.id)
        .limit(limit)
    )
    return list(db.session.scalars(query))


def logs_response(job: ProvisionerJob) -> Response:
    """GET .../logs: the lines after ``?after=`` as JSON, or with ``follow=true`` a live SSE stream."""
    from app.provisioning.streams import JsonRenderer, follow_job, relay_for, stream_cursor

    after = request.args.get("after", "0")
    if not after.isdigit():
        raise InvalidInput("after must be a log id (a whole number).")
    if request.args.get("follow", "").lower() not in ("true", "1"):
        return jsonify([line.to_json() for line in job_logs(job.id, int(after))])
    relay = relay_for(current_app.config["SLIPWAY_SETTINGS"].redis_url)
    cursor = stream_cursor(after, request.headers.get("Last-Event-ID"))
    return event_stream(follow_job(relay, job.id, cursor, JsonRenderer()))


def event_stream(events: Iterator[str]) -> Response:
    # no-cache and no proxy buffering: each event must reach the viewer as soon as it is written.
    return Response(
        stream_with_context(live_stream(events)),  # a slot per stream, and a lifetime (app/limits.py)
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def publish_log_notice(job_id: str, *, end: bool = False) -> None:
    """A small notice that new lines (or the end) are in the database; streams read the lines themselves."""
    try:
        get_redis().publish(LOG_CHANNEL_PREFIX + job_id, b"end" if end else b"logs")
    except Exception:  # live viewers miss a nudge and catch up from the database on their next poll
        log.warning("could not publish a log notice for job %s", job_id, exc_info=True)
