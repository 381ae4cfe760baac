"""The daemon side of the job protocol: register, acquire, report (logs + heartbeat), complete, fail.

Daemons hold no database credentials; they reach these services over HTTP (``daemon_api.py``). Every call
checks that the daemon owns the job it talks about, so a confused or stale daemon can do no harm.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from app.columns import utcnow
from app.config import Settings
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.extensions import db
from app.provisioning.jobs import JOB_HANDLERS, publish_log_notice
from app.provisioning.models import (
    LOG_LEVELS,
    LOG_SOURCES,
    RUNNING,
    ProvisionerDaemon,
    ProvisionerJob,
    ProvisionerJobLog,
    ProvisionerKey,
)
from app.provisioning.tags import SCOPE_ORGANIZATION, TagError, daemon_can_run, daemon_queue_names, normalise_tags
from app.users.models import User

log = logging.getLogger(__name__)

MAX_JOB_LOG_BYTES = 1024 * 1024
MAX_LINE_CHARS = 1024
TRUNCATED_MARKER = " … [line truncated]"
MAX_BATCH_LINES = 1000
REDACTED = "********"
# Shorter values ("1", "eu") would mask ordinary words all over the log while protecting nothing.
MIN_SECRET_CHARS = 4
DAEMON_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class DaemonCredential:
    """Who a daemon authenticated as (reference §3.2): builtin and psk serve the organization; a key fixes the
    tags; a user may always serve their own user-scoped jobs, and the organization when a template admin."""

    kind: str
    user: User | None = None
    key: ProvisionerKey | None = None

    @property
    def user_id(self) -> str | None:
        return self.user.id if self.user else None

    @property
    def key_id(self) -> str | None:
        return self.key.id if self.key else None


ORG_DAEMON_FORBIDDEN = (
    "Only owners and template admins may run organization provisioners; "
    "start a user-scoped daemon instead (--tag scope=user)."
)


def daemon_tags(credential: DaemonCredential, requested: dict[str, str]) -> dict[str, str]:
    """The tags this credential may serve, from the tags the daemon asked for."""
    if credential.key is not None:
        if requested:
            raise InvalidInput("A daemon started with a provisioner key serves the key's tags; do not send tags.")
        return dict(credential.key.tags)
    try:
        tags = normalise_tags(requested, credential.user_id)  # without a user, scope=user falls back to org
    except TagError as exc:
        raise InvalidInput(str(exc)) from exc
    if credential.user is not None and tags["scope"] == SCOPE_ORGANIZATION and not credential.user.is_template_admin:
        raise Forbidden(ORG_DAEMON_FORBIDDEN)
    return tags


def register_daemon(
    credential: DaemonCredential, name: str, tags: dict[str, str], version: str, settings: Settings
) -> tuple[ProvisionerDaemon, list[str]]:
    """Create or refresh the daemon row; a daemon re-registering under its name fails the jobs it held."""
    name = name.strip()
    if not DAEMON_NAME_PATTERN.match(name):
        raise InvalidInput("A provisioner daemon name is 1-64 letters, digits, '.', '_' or '-'.")
    normalised = daemon_tags(credential, tags)
    try:
        queues = daemon_queue_names(normalised, settings.provisioner_untagged_jobs)
    except TagError as exc:
        raise InvalidInput(str(exc)) from exc
    daemon = db.session.scalar(
        select(ProvisionerDaemon).where(
            ProvisionerDaemon.name == name,
            ProvisionerDaemon.auth == credential.kind,
            _same(ProvisionerDaemon.user_id, credential.user_id),
            _same(ProvisionerDaemon.key_id, credential.key_id),
        )
    )
    if daemon is None:
        daemon = ProvisionerDaemon(
            name=name, auth=credential.kind, user_id=credential.user_id, key_id=credential.key_id
        )
        db.session.add(daemon)
    else:
        # The same daemon came back (restart, crash): whatever it was running is lost with the old process.
        fail_jobs_held_by(daemon.id, "The provisioner daemon restarted while running this job.")
    daemon.tags, daemon.version, daemon.last_seen_at = normalised, version[:64], utcnow()
    db.session.commit()
    return daemon, queues


def _same(column: Any, value: str | None) -> Any:
    return column.is_(None) if value is None else column == value


def get_daemon(credential: DaemonCredential, daemon_id: str) -> ProvisionerDaemon:
    """The calling daemon, refreshed as seen; its credential must still allow what it registered for."""
    daemon = db.session.get(ProvisionerDaemon, daemon_id)
    if (
        daemon is None
        or daemon.auth != credential.kind
        or daemon.user_id != credential.user_id
        or daemon.key_id != credential.key_id
    ):
        raise NotFound("Unknown provisioner daemon: register first.")
    user = credential.user
    if user is not None and daemon.tags.get("scope") == SCOPE_ORGANIZATION and not user.is_template_admin:
        raise Forbidden(ORG_DAEMON_FORBIDDEN)  # demoted since it registered
    now = utcnow()
    if (now - daemon.last_seen_at).total_seconds() > 1:
        daemon.last_seen_at = now
    return daemon


def heartbeat(daemon: ProvisionerDaemon) -> None:
    db.session.commit()  # get_daemon moved last_seen_at forward


def acquire_job(daemon: ProvisionerDaemon, job_id: str, settings: Settings) -> dict[str, Any]:
    """Claim a pending job with one conditional UPDATE; zero rows means it was taken, canceled or is gone."""
    job = db.session.get(ProvisionerJob, job_id)
    if job is None:
        raise NotFound("No such job.")
    if not daemon_can_run(daemon.tags, job.tags, settings.provisioner_untagged_jobs):
        raise Forbidden("This daemon's tags do not match the job's tags.")
    now = utcnow()
    claimed = db.session.execute(
        update(ProvisionerJob)
        .where(
            ProvisionerJob.id == job_id,
            ProvisionerJob.started_at.is_(None),
            ProvisionerJob.canceled_at.is_(None),
            ProvisionerJob.completed_at.is_(None),
        )
        .values(started_at=now, updated_at=now, worker_id=daemon.id)
    )
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        db.session.rollback()
        raise Conflict("The job is no longer pending.")
    db.session.commit()
    publish_log_notice(job.id)  # viewers see "pending" turn into "running" at once
    db.session.refresh(job)
    try:
        payload = JOB_HANDLERS[job.type].payload(job)
    except Exception as exc:  # a job we cannot describe cannot run: fail it rather than leave it running
        log.exception("building the payload of job %s failed", job.id)
        finish_job(job, error=f"Preparing the job failed: {exc}")
        raise Conflict("The job could not be prepared; it has been marked failed.") from exc
    return {"id": job.id, "type": job.type, "tags": job.tags, "access_url": settings.access_url, **payload}


def owned_running_job(daemon: ProvisionerDaemon, job_id: str) -> ProvisionerJob:
    job = db.session.get(ProvisionerJob, job_id)
    if job is None:
        raise NotFound("No such job.")
    if job.worker_id != daemon.id:
        raise Forbidden("This daemon does not hold that job.")
    if job.completed_at is not None:
        raise Conflict(f"The job already ended ({job.status}).")
    return job


def append_logs(daemon: ProvisionerDaemon, job_id: str, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Store a batch of log lines (capped per job) and bump the heartbeat; the reply says if it was canceled."""
    job = owned_running_job(daemon, job_id)
    if len(lines) > MAX_BATCH_LINES:
        raise InvalidInput(f"Send at most {MAX_BATCH_LINES} lines per batch.")
    secrets = sorted(
        {value for value in JOB_HANDLERS[job.type].secrets(job) if len(value) >= MIN_SECRET_CHARS},
        key=len,
        reverse=True,
    )
    rows = [_log_row(job, line, secrets) for line in lines]
    kept = [row for row in rows if row is not None]
    job.updated_at = utcnow()
    db.session.add_all(kept)
    db.session.commit()
    if kept:
        publish_log_notice(job.id)
    return {"canceled": job.canceled_at is not None}


def _log_row(job: ProvisionerJob, line: dict[str, Any], secrets: list[str]) -> ProvisionerJobLog | None:
    level = line.get("level") if line.get("level") in LOG_LEVELS else "info"
    source = line.get("source") if line.get("source") in LOG_SOURCES else "provisioner"
    output = str(line.get("output", ""))
    for secret in secrets:  # longest first, so a secret containing another is masked whole
        output = output.replace(secret, REDACTED)
    if len(output) > MAX_LINE_CHARS:
        output = output[: MAX_LINE_CHARS - len(TRUNCATED_MARKER)] + TRUNCATED_MARKER
    size = len(output.encode())
    if job.logs_overflowed:
        job.logs_dropped += 1
        return None
    if job.logs_length + size > MAX_JOB_LOG_BYTES:
        job.logs_overflowed = True
        job.logs_dropped += 1
        notice = f"Log limit of {MAX_JOB_LOG_BYTES // 1024} KiB reached: further lines of this job are not stored."
        return ProvisionerJobLog(
            job_id=job.id,
            source="provisioner_daemon",
            level="warn",
            stage=str(line.get("stage", ""))[:128],
            output=notice,
        )
    job.logs_length += size
    return ProvisionerJobLog(
        job_id=job.id, source=str(source), level=str(level), stage=str(line.get("stage", ""))[:128], output=output
    )


def complete_job(daemon: ProvisionerDaemon, job_id: str, body: dict[str, Any]) -> None:
    job = owned_running_job(daemon, job_id)
    try:
        JOB_HANDLERS[job.type].complete(job, body)
    except (InvalidInput, Conflict) as exc:
        db.session.rollback()
        finish_job(job, error=exc.message)
        return
    finish_job(job)


def fail_job(daemon: ProvisionerDaemon, job_id: str, body: dict[str, Any]) -> None:
    """The job ended without success; the state Terraform left is kept. A job someone canceled ends canceled
    (its interrupted Terraform is the expected outcome, not a failure to report)."""
    job = owned_running_job(daemon, job_id)
    error = str(body.get("error") or "The provisioner daemon reported a failure without a message.")
    JOB_HANDLERS[job.type].fail(job, body)
    if job.canceled_at is not None:
        finish_job(job)
        return
    finish_job(job, error=error, error_code=str(body.get("error_code") or "") or None)


def finish_job(job: ProvisionerJob, *, error: str | None = None, error_code: str | None = None) -> None:
    now = utcnow()
    job.completed_at = now
    job.updated_at = now
    if error is not None:
        job.error = error[:4000]
        job.error_code = error_code
    db.session.commit()
    publish_log_notice(job.id, end=True)


def fail_jobs_held_by(daemon_id: str, reason: str) -> int:
    jobs = db.session.scalars(
        select(ProvisionerJob).where(ProvisionerJob.worker_id == daemon_id, ProvisionerJob.completed_at.is_(None))
    ).all()
    for job in jobs:
        if job.status in (RUNNING, "canceling"):
            _reaper_notice(job, reason)
            finish_job(job, error=reason)
    return len(jobs)


def _reaper_notice(job: ProvisionerJob, reason: str) -> None:
    for output in ("", "=" * 60, reason, "=" * 60, ""):
        db.session.add(
            ProvisionerJobLog(
                job_id=job.id, source="provisioner_daemon", level="error", stage="Cleaning up", output=output
            )
        )
