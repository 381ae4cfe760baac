"""A job's log as HTML: lines grouped under stage headers, each header with its stage's duration.

Used for the first render of a page and for each batch the live stream appends. A stage's duration is known
once the next stage starts (or the job ends): within one batch it is written into the header; for a header
already on the page it is sent out of band.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Response, flash, redirect, render_template, request
from markupsafe import Markup, escape
from sqlalchemy import func, select
from werkzeug.wrappers import Response as WerkzeugResponse

from app.core.errors import DomainError
from app.core.extensions import db
from app.events import get_relay
from app.events.sse import event_stream, sse_event, stream_cursor
from app.provisioning.failures import failure_cause
from app.provisioning.jobs import job_logs
from app.provisioning.log_api import follow_job
from app.provisioning.models import FAILED, LogLine, ProvisionerJob, ProvisionerJobLog
from app.provisioning.presenter import job_json
from protocol.logs import FailureCause

# What a job's page shows once the job ends: fixed HTML, or HTML made from the ended job.
FollowUp = Markup | Callable[[ProvisionerJob], str]


def _duration(start: datetime, end: datetime) -> str:
    seconds = max(int((end - start).total_seconds()), 0)
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class LogHtml:
    def __init__(self, open_stage: LogLine | None = None) -> None:
        # The first line of the stage still running when this batch starts (its header is already shown).
        self.open_stage = open_stage

    def render(self, lines: Sequence[LogLine], end: datetime | None = None) -> Markup:
        parts: list[str] = []
        pending_header: int | None = None  # index in parts of a header written in this batch, duration unknown
        for line in lines:
            if self.open_stage is None or line.stage != self.open_stage.stage:
                if self.open_stage is not None:
                    parts.append(self._close(pending_header, parts, line.created_at))
                pending_header = len(parts)
                parts.append(self._header(line, ""))
                self.open_stage = line
            if not line.output and line.source == "provisioner_daemon":  # the daemon's marks where a stage begins
                continue
            parts.append(
                f'<div class="log-line level-{escape(line.level)}" id="log-line-{line.id}" data-id="{line.id}">'
                f'<span class="log-time">{line.created_at.strftime("%H:%M:%S")}</span>'
                f'<span class="log-text">{escape(line.output)}</span></div>'
            )
        if end is not None and self.open_stage is not None:
            parts.append(self._close(pending_header, parts, end))
            self.open_stage = None
        return Markup("".join(parts))  # noqa: S704 - every value above is escaped

    def _header(self, first: LogLine, duration: str) -> str:
        return (
            f'<div class="log-stage" id="stage-{first.id}">{escape(first.stage) or "&nbsp;"}'
            f'<span class="stage-duration" id="stage-{first.id}-duration">{duration}</span></div>'
        )

    def _close(self, pending_header: int | None, parts: list[str], end: datetime) -> str:
        """Fix the open stage's duration: rewrite its header if it is in this batch, else update it out of band."""
        assert self.open_stage is not None  # noqa: S101 - callers check
        duration = _duration(self.open_stage.created_at, end)
        if pending_header is not None:
            parts[pending_header] = self._header(self.open_stage, duration)
            return ""
        target = f"stage-{self.open_stage.id}-duration"
        return f'<span id="{target}" class="stage-duration" hx-swap-oob="true">{duration}</span>'


@dataclass(frozen=True)
class FailureHints:
    """What a feature above adds to a failed job's cause when its stream ends: ``explain`` (the cause, with e.g. the
    parameters it likely comes from) and where to change them."""

    explain: Callable[[FailureCause], FailureCause | None]
    change_parameters_url: str | None = None


class HtmlRenderer:
    """The dashboard's stream: `log` events append HTML (status changes ride along out of band), `end` closes."""

    def __init__(
        self,
        open_stage: LogLine | None,
        status_of: Callable[[ProvisionerJob], str],
        *,
        job_status: bool,
        follow_up: FollowUp,
        retry_url: str | None = None,
        failure_hints: FailureHints | None = None,
    ) -> None:
        self.log = LogHtml(open_stage)
        self.retry_url = retry_url
        self.failure_hints = failure_hints
        self.status_of = status_of
        self.job_status = job_status
        self.follow_up = follow_up
        self.shown_status: str | None = None
        self.placeholder_removed = False

    def update(self, job: ProvisionerJob, lines: Sequence[LogLine]) -> Iterator[str]:
        parts: list[str] = []
        if lines:
            if not self.placeholder_removed:  # "waiting for a daemon…" goes with the first line
                parts.append('<div id="log-empty" hx-swap-oob="delete"></div>')
                self.placeholder_removed = True
            parts.append(self.log.render(lines))
        status = self.status_of(job)
        if status != self.shown_status:
            self.shown_status = status
            parts.append(self._badge(status))
        if parts:
            # The id lets a reconnecting browser (EventSource sends Last-Event-ID) resume without repeating lines.
            yield sse_event("log", "".join(parts), lines[-1].id if lines else None)

    def end(self, job: ProvisionerJob) -> Iterator[str]:
        closing = self.log.render([], end=job.completed_at or job.updated_at)
        took = _duration(job.started_at, job.completed_at) if job.started_at and job.completed_at else ""
        summary = f'<span class="muted">{escape(job.status.capitalize())}{f" in {took}" if took else ""}.</span>'
        cause = failure_cause(job)
        hints = self.failure_hints
        failure = render_template(
            "provisioning/_partials/failure.html",
            failure=hints.explain(cause) if hints is not None and cause is not None else cause,
            oob=True,
            retry_url=self.retry_url if job.status == FAILED else None,
            change_parameters_url=hints.change_parameters_url if hints is not None else None,
        )
        # Joined as plain strings: adding a str to Markup would escape the badge's HTML.
        parts = [closing, self._badge(self.status_of(job)), failure, summary, self._follow_up(job)]
        yield sse_event("end", "".join(parts))

    def _follow_up(self, job: ProvisionerJob) -> str:
        return self.follow_up if isinstance(self.follow_up, str) else self.follow_up(job)

    def _badge(self, status: str) -> str:
        return render_template(
            "provisioning/_partials/status.html", status=status, oob="job-status", job_status=self.job_status
        )


def log_page_context(job: ProvisionerJob) -> dict[str, Any]:
    """What a job's page shows of it: the job (read before its lines, as the stream reads them), the log so far,
    and the cursor the page's stream resumes after."""
    shown = job_json(job)
    lines = job_logs(job.id)
    return {
        "job": shown,
        "log_html": LogHtml().render(lines, end=job.completed_at),
        "last_id": lines[-1].id if lines else 0,
    }


def stage_opening(job_id: str, cursor: int) -> LogLine | None:
    """The first line of the stage that line ``cursor`` belongs to: where a resumed page's open stage began."""
    last = db.session.get(ProvisionerJobLog, cursor) if cursor else None
    if last is None or last.job_id != job_id:
        return None
    boundary = db.session.scalar(
        select(func.max(ProvisionerJobLog.id)).where(
            ProvisionerJobLog.job_id == job_id, ProvisionerJobLog.id < cursor, ProvisionerJobLog.stage != last.stage
        )
    )
    first_id = db.session.scalar(
        select(func.min(ProvisionerJobLog.id)).where(
            ProvisionerJobLog.job_id == job_id,
            ProvisionerJobLog.id > (boundary or 0),
            ProvisionerJobLog.stage == last.stage,
        )
    )
    first = db.session.execute(select(*LogLine.columns()).where(ProvisionerJobLog.id == (first_id or cursor))).one()
    return LogLine(**first._asdict())


def page_stream(
    job: ProvisionerJob,
    status_of: Callable[[ProvisionerJob], str],
    *,
    job_status: bool,
    follow_up: FollowUp,
    retry_url: str | None = None,
    failure_hints: FailureHints | None = None,
) -> Response:
    """The live stream a job's page connects to, resuming after ``?after=`` or Last-Event-ID. ``follow_up`` is
    shown when the job ends (the page's next step; a function of the ended job when the step depends on how
    it ended); ``retry_url``, where the viewer may retry a failed job; ``failure_hints``, what the job's feature adds
    to its cause (a workspace build: the parameters changed since its last good build)."""
    cursor = stream_cursor(request.args.get("after"), request.headers.get("Last-Event-ID"))
    opening = stage_opening(job.id, cursor)
    renderer = HtmlRenderer(
        opening, status_of, job_status=job_status, follow_up=follow_up, retry_url=retry_url, failure_hints=failure_hints
    )
    return event_stream(follow_job(get_relay(), job.id, cursor, renderer))


def retry_from_form(retry: Callable[[bool], str], failed_page: str, what: str) -> WerkzeugResponse:
    """A failed job's Retry form (``debug=1``: "Retry with debug logging"): ``retry(debug_logging)`` queues the new
    job and gives its page, where the person goes; what refuses it is said on the failed job's page."""
    debug_logging = request.form.get("debug") == "1"
    try:
        new_page = retry(debug_logging)
    except DomainError as error:
        flash(error.message, "error")
        return redirect(failed_page)
    if debug_logging:
        flash(f"Retrying with Terraform's debug log (TF_LOG=debug) for this {what}.", "info")
    return redirect(new_page)
