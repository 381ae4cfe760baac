"""A job's log for programs: ``GET .../logs`` as JSON, or with ``follow=true`` the live SSE stream of API.md."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Protocol

from flask import Response, request

from app.core.extensions import db
from app.core.validation import query_int
from app.events import get_relay
from app.events.relay import EventRelay
from app.events.sse import event_stream, log_cursor, sse_event, stream_cursor
from app.events.streams import follow_lines, line_event
from app.provisioning.failures import failure_cause
from app.provisioning.jobs import LOG_PAGE_LINES, MAX_LOG_LINES_READ, job_logs
from app.provisioning.models import ACTIVE_STATUSES, AWAITING_CONFIRMATION, LogLine, ProvisionerJob
from protocol.codec import JsonObject


class JobLogRenderer(Protocol):
    """How a stream shows a job's lines and its end (JSON for programs, HTML for pages)."""

    def update(self, job: ProvisionerJob, lines: Sequence[LogLine]) -> Iterator[str]: ...

    def end(self, job: ProvisionerJob) -> Iterator[str]: ...


def follow_job(relay: EventRelay, job_id: str, after: int, renderer: JobLogRenderer) -> Iterator[str]:
    def fetch(since: int) -> tuple[ProvisionerJob | None, list[LogLine]]:
        job = db.session.get(ProvisionerJob, job_id, populate_existing=True)
        return job, job_logs(job_id, since) if job is not None else []

    return follow_lines(relay, job_id, after, fetch, _followed_to_its_end, renderer)


def _followed_to_its_end(job: ProvisionerJob) -> bool:
    # Awaiting confirmation ends what can be followed: the next lines come after a person decides.
    return job.status not in ACTIVE_STATUSES or job.status == AWAITING_CONFIRMATION


class JsonRenderer:
    """API.md's stream: one `log` event per line, then `end` with the job's final status."""

    def update(self, job: ProvisionerJob, lines: Sequence[LogLine]) -> Iterator[str]:
        if lines:  # one write for the whole batch, not one per line
            yield "".join(line_event(line) for line in lines)

    def end(self, job: ProvisionerJob) -> Iterator[str]:
        body: JsonObject = {"status": job.status}
        if job.error:
            body["error"] = job.error
        if (cause := failure_cause(job)) is not None:
            body["failure"] = cause.to_json()
        yield sse_event("end", json.dumps(body))


def logs_response(job: ProvisionerJob) -> Response:
    """GET .../logs: the lines after ``?after=`` as JSON, or with ``follow=true`` a live SSE stream."""
    after = log_cursor(request.args.get("after", "0"))
    if request.args.get("follow", "").lower() not in ("true", "1"):
        # A page at a time (the next page: ?after=<the last id>): 1,000 lines, or ?limit= up to 10,000.
        limit = query_int("limit", LOG_PAGE_LINES, minimum=1, maximum=MAX_LOG_LINES_READ)
        page = job_logs(job.id, after, limit)
        return Response(json.dumps([line.to_json() for line in page]), mimetype="application/json")
    cursor = stream_cursor(request.args.get("after"), request.headers.get("Last-Event-ID"))
    return event_stream(follow_job(get_relay(), job.id, cursor, JsonRenderer()))
