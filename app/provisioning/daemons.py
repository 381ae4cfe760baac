"""The daemon side of the job protocol: register, take a job (acquire it, or wait for one), report (logs and
heartbeat), complete, fail.

Daemons hold no database credentials; they reach these services over HTTP (``daemon_api.py``). Every call checks
that the daemon owns the job it talks about, so a confused or stale daemon can do no harm.

Redis access is the server's to give (README, "What Redis is trusted with"): built-in daemons, and daemons whose
credential kind the operator named in ``--provisioner-trust-redis``, get the Redis address and their queue names;
every other daemon waits for jobs over HTTP (:func:`wait_for_job`), woken by the same queue notices. Either way a
daemon is only told which job to try: it acquires it itself, and the database decides who gets it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import redis
from sqlalchemy import ColumnElement, func, insert, select, update
from sqlalchemy.orm import InstrumentedAttribute

from app.audit.recorder import ACTION_REGISTER, change, record
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.errors import Conflict, Forbidden, InvalidInput, NotFound, ServiceUnavailable
from app.core.extensions import db, rows_changed
from app.core.offload import run_off_loop
from app.events.notices import publish_job_notice
from app.events.relay import EventRelay, queue_key
from app.organizations.models import DEFAULT_ORGANIZATION_ID, Organization
from app.organizations.services import get_organization, is_member
from app.provisioning.jobs import handlers_for
from app.provisioning.masking import JobMasks, SecretMask, build_mask, secret_needles
from app.provisioning.models import (
    RUNNING,
    ProvisionerDaemon,
    ProvisionerJob,
    ProvisionerJobLog,
    ProvisionerKey,
    queue_namespace,
)
from app.provisioning.queue import terraform_fits
from app.provisioning.timings import add_job_timings
from app.users.models import User
from protocol.logs import STAGE_CLEANUP, LogLine
from protocol.provisionerd import (
    AcquiredJob,
    CommitQuota,
    JobCompletion,
    JobFailure,
    JobOffer,
    LogBatch,
    LogBatchReply,
    QuotaCommitted,
    Registered,
    Registration,
)
from protocol.tags import SCOPE_ORGANIZATION, TagError, daemon_can_run, daemon_queue_names, normalise_tags
from protocol.terraform_versions import satisfies

log = logging.getLogger(__name__)

MAX_JOB_LOG_BYTES = 1024 * 1024
MAX_LINE_CHARS = 1024
# Two copies of one batch (a retry racing the original) take turns; more rounds than this means something is wrong.
LOG_BATCH_ATTEMPTS = 5
TRUNCATED_MARKER = " … [line truncated]"
DAEMON_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$")
# A waiting daemon's request re-checks the database this often even without a notice (one may have been lost).
WAIT_RECHECK_SECONDS = 5.0
# An offered job is kept from other waiting daemons this long: ample for the offered one to acquire it.
OFFER_LEASE_MILLISECONDS = 5_000
OFFER_LEASE_PREFIX = "slipway:job-offer:"
# How many of the oldest pending jobs one look considers, when the first ones are on offer to other daemons.
OFFER_CANDIDATES = 50


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


def trusted_with_redis(credential_kind: str, settings: Settings) -> bool:
    """Redis carries tunnels' bytes: only daemons the operator trusts as much as the server itself get it."""
    return credential_kind == "builtin" or credential_kind in settings.provisioner_trust_redis


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


def daemon_organization(credential: DaemonCredential, requested: str) -> Organization:
    """The organisation whose jobs this credential may run, from the one the daemon named ("": the default one):
    a key's is its own; a person's must be one they belong to; the PSK's and the built-in daemons' any."""
    if credential.key is not None:
        own = get_organization(credential.key.organization_id)
        if requested and requested not in (own.id, own.name):
            raise InvalidInput(f"This provisioner key belongs to organisation {own.name}: drop --org {requested}.")
        return own
    try:
        found = get_organization(requested or DEFAULT_ORGANIZATION_ID)
    except NotFound as exc:
        raise InvalidInput(f"No organisation {requested!r}: check --org (`slipway organizations list`).") from exc
    user = credential.user
    if user is not None and not user.is_owner and not is_member(found.id, user.id):
        raise InvalidInput(f"No organisation {requested!r}: check --org (`slipway organizations list`).")
    return found


def register_daemon(credential: DaemonCredential, registration: Registration, settings: Settings) -> Registered:
    """Create or refresh the daemon row; a daemon registering again (a restart) fails the jobs it held."""
    name = registration.name.strip()
    if not DAEMON_NAME_PATTERN.match(name):
        raise InvalidInput("A provisioner daemon name is 1-64 letters, digits, '.', '_' or '-'.")
    normalised = daemon_tags(credential, registration.tags)
    organization = daemon_organization(credential, registration.organization.strip())
    try:
        queues = daemon_queue_names(
            normalised, settings.provisioner_untagged_jobs, queue_namespace(organization.id)
        )  # fmt: skip
    except TagError as exc:
        raise InvalidInput(str(exc)) from exc
    instance_id = registration.instance_id.strip() or None
    # The same daemon again is the same identity (or, for a daemon without one, the same name), with the same
    # credential: a same-named daemon elsewhere is another daemon, and never fails this one's jobs.
    same_daemon = (
        ProvisionerDaemon.instance_id == instance_id
        if instance_id
        else (ProvisionerDaemon.name == name) & ProvisionerDaemon.instance_id.is_(None)
    )
    daemon = db.session.scalar(
        select(ProvisionerDaemon).where(
            same_daemon,
            ProvisionerDaemon.auth == credential.kind,
            _same(ProvisionerDaemon.user_id, credential.user_id),
            _same(ProvisionerDaemon.key_id, credential.key_id),
        )
    )
    if daemon is None:
        daemon = ProvisionerDaemon(
            name=name, instance_id=instance_id, auth=credential.kind, user_id=credential.user_id,
            key_id=credential.key_id,
        )  # fmt: skip
        db.session.add(daemon)
    else:
        # The same daemon came back (restart, crash): whatever it was running is lost with the old process.
        fail_jobs_held_by(daemon.id, "The provisioner daemon restarted while running this job.")
    daemon.name, daemon.tags = name, normalised  # the name is a label: it may change across restarts
    daemon.organization_id = organization.id
    daemon.version, daemon.last_seen_at = registration.version[:64], utcnow()
    daemon.ephemeral = registration.ephemeral
    daemon.terraform_binary, daemon.terraform_version = registration.terraform_binary, registration.terraform_version
    db.session.flush()  # its id, for the audit entry
    # Which credential registered it (a key by name, the PSK), never the credential itself.
    diff = {"auth": change(credential.kind), "tags": change(normalised), "organization": change(organization.name)}
    record("provisioner_daemon", daemon.id, daemon.name, ACTION_REGISTER, diff)
    db.session.commit()
    trusted = trusted_with_redis(credential.kind, settings)
    return Registered(
        daemon_id=daemon.id,
        name=daemon.name,
        tags=daemon.tags,
        organization=organization.name,
        queues=tuple(queues) if trusted else (),
        redis_url=settings.advertised_redis_url if trusted else None,
        heartbeat_seconds=settings.provisioner_heartbeat_interval,
        force_cancel_seconds=settings.provisioner_force_cancel_interval,
    )


def _same(column: InstrumentedAttribute[str | None], value: str | None) -> ColumnElement[bool]:
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


def _claim(daemon: ProvisionerDaemon, job_id: str) -> bool:
    """The conditional UPDATE every acquisition goes through: zero rows means taken, canceled or gone."""
    now = utcnow()
    claimed = db.session.execute(
        update(ProvisionerJob)
        .where(
            ProvisionerJob.id == job_id,
            ProvisionerJob.waiting(),
        )
        .values(started_at=now, updated_at=now, worker_id=daemon.id)
    )
    if rows_changed(claimed) != 1:
        db.session.rollback()
        return False
    db.session.commit()
    publish_job_notice(job_id)  # viewers see "pending" turn into "running" at once
    return True


def acquire_job(daemon: ProvisionerDaemon, job_id: str, settings: Settings) -> AcquiredJob:
    """Claim a pending job for the daemon that its queue woke (the RQ path)."""
    job = db.session.get(ProvisionerJob, job_id)
    if job is None or job.organization_id != daemon.organization_id:  # another organisation's: not even named
        raise NotFound("No such job.")
    if not daemon_can_run(daemon.tags, job.tags, settings.provisioner_untagged_jobs):
        raise Forbidden("This daemon's tags do not match the job's tags.")
    if not terraform_fits(daemon, job):
        raise Forbidden(
            f"This job needs terraform {job.required_terraform}; this daemon runs {daemon.terraform or 'an unknown'}"
            " version."
        )
    if not _claim(daemon, job_id) and not _holds(daemon, job_id):
        raise Conflict("The job is no longer pending.")
    return _payload(job_id, settings)


def _holds(daemon: ProvisionerDaemon, job_id: str) -> bool:
    """The daemon asks again for a job it already claimed: its first request's reply was lost on the way. It gets
    the job again (a refusal would leave the job "running" with nobody running it until the hang timeout)."""
    job = db.session.get(ProvisionerJob, job_id, populate_existing=True)
    return job is not None and job.worker_id == daemon.id and job.completed_at is None and job.started_at is not None


def _payload(job_id: str, settings: Settings) -> AcquiredJob:
    job = db.session.get(ProvisionerJob, job_id, populate_existing=True)
    assert job is not None  # noqa: S101 - claimed just now, and jobs are never deleted while running
    base = AcquiredJob(
        id=job.id, type=job.type, tags=job.tags, access_url=settings.access_url,  # type: ignore[arg-type]
        lease_seconds=settings.provisioner_hang_timeout, first_log_seq=job.log_lines_received,
    )  # fmt: skip
    try:
        return handlers_for(job).payload(job, base)
    except Exception as exc:  # a job we cannot describe cannot run: fail it rather than leave it running
        log.exception("building the payload of job %s failed", job.id)
        finish_job(job, error=f"Preparing the job failed: {exc}")
        raise Conflict("The job could not be prepared; it has been marked failed.") from exc


def wait_for_job(
    daemon_id: str, queues: Sequence[str], timeout: float, relay: EventRelay, leases: redis.Redis,
    terraform_version: str = "", until: Callable[[], bool] = lambda: False,
) -> JobOffer | None:  # fmt: skip
    """The HTTP path: the first job pending on one of ``queues`` (high priority first, then oldest) that no other
    waiting daemon was just offered, waiting up to ``timeout`` seconds for one to be queued. No database connection
    is held while waiting.

    A job is offered, not claimed: whether the daemon still listens when the answer goes out cannot be known, and a
    job claimed for a daemon that left would sit "running" until the hang timeout. The short offer lease keeps
    daemons waiting together from all being offered the same job (only one could acquire it; the others would
    come back for the next, one round per job); if the offered daemon went away, the lease runs out and the job is
    offered again. The wait also ends (no job) once ``until()`` is true, looked at every few seconds: a draining
    replica answers its long polls before it stops rather than leaving them to be cut."""
    waiter = threading.Event()
    for name in queues:
        relay.watch(queue_key(name), waiter)
    deadline = time.monotonic() + timeout
    try:
        while True:
            waiter.clear()  # before looking, so a job queued meanwhile wakes the next wait at once
            pending = db.session.execute(
                select(ProvisionerJob.id, ProvisionerJob.required_terraform)
                .where(
                    ProvisionerJob.queue.in_(queues),
                    ProvisionerJob.waiting(),
                )
                .order_by(*ProvisionerJob.queue_order())
                .limit(OFFER_CANDIDATES)
            ).all()
            db.session.remove()
            for job_id, required in pending:
                if required and not satisfies(terraform_version, required):
                    continue  # the template needs another Terraform: a daemon that has it will be offered the job
                if _lease_offer(leases, job_id, daemon_id):
                    return JobOffer(job_id=job_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or until():
                return None
            waiter.wait(min(remaining, WAIT_RECHECK_SECONDS))
    finally:
        for name in queues:
            relay.unwatch(queue_key(name), waiter)


def _lease_offer(leases: redis.Redis, job_id: str, daemon_id: str) -> bool:
    """Whether ``job_id`` may be offered to ``daemon_id``: no one else holds its lease (the same daemon asking
    again, after a lost answer, gets it again)."""
    key = f"{OFFER_LEASE_PREFIX}{job_id}"
    if leases.set(key, daemon_id, nx=True, px=OFFER_LEASE_MILLISECONDS):
        return True
    holder = leases.get(key)
    return holder is None or holder == daemon_id.encode()


def owned_running_job(daemon: ProvisionerDaemon, job_id: str) -> ProvisionerJob:
    job = db.session.get(ProvisionerJob, job_id)
    if job is None:
        raise NotFound("No such job.")
    if job.worker_id != daemon.id:
        raise Forbidden("This daemon does not hold that job.")
    if job.completed_at is not None:
        raise Conflict(f"The job already ended ({job.status}).")
    return job


def commit_quota(daemon: ProvisionerDaemon, job_id: str, request: CommitQuota) -> QuotaCommitted:
    """Whether the running job's plan, costing ``request.daily_cost`` a day, may be applied (its type decides)."""
    job = owned_running_job(daemon, job_id)
    refusal = handlers_for(job).commit_quota(job, request.daily_cost)
    # The answer ends the check's transaction, and with it the lock the check took on the owner's row.
    db.session.commit()
    return QuotaCommitted(ok=not refusal, message=refusal)


def append_logs(daemon: ProvisionerDaemon, job_id: str, batch: LogBatch) -> LogBatchReply:
    """Store a batch of log lines (capped per job, each numbered line once) and bump the heartbeat; the reply says if
    the job was canceled and whether to send more lines."""
    for _ in range(LOG_BATCH_ATTEMPTS):
        job = owned_running_job(daemon, job_id)
        # Masking may wait on a thread (run_off_loop): a request that waits while it holds SQLite's write lock
        # stalls every other writer of its web worker, whose waits on the lock block the event loop the masking
        # needs to resume (seen as "database is locked" and worker timeouts). So the heartbeat get_daemon moved
        # (flushed by the job's read) is stored now, and the lines are masked before anything else is written.
        db.session.commit()
        mask = job_mask(job)
        lines = batch.logs
        outputs = run_off_loop(partial(mask.apply_all, [line.output for line in lines])) if lines else []
        if batch.first_seq is not None:
            seen = job.log_lines_received
            skip = max(0, seen - batch.first_seq)  # a batch sent again: what was stored is not stored twice
            lines, outputs = lines[skip:], outputs[skip:]
            end = max(seen, batch.first_seq + len(batch.logs))
            if not _advance_log_count(job.id, seen, end):
                db.session.rollback()  # a copy of this batch was stored meanwhile: look again
                continue
            job.logs_dropped += max(0, batch.first_seq - seen)  # numbers never sent: lines past the cap
        rows = (_log_row(job, line, output) for line, output in zip(lines, outputs, strict=True))
        kept = [row for row in rows if row is not None]
        job.updated_at = utcnow()
        if kept:  # one multi-row INSERT, without an ORM object per line (most of a batch's cost when it had them)
            db.session.execute(insert(ProvisionerJobLog), kept)
        db.session.commit()
        if kept:
            publish_job_notice(job.id)
        return LogBatchReply(canceled=job.canceled_at is not None, stop_sending=job.logs_overflowed)
    raise ServiceUnavailable("The job's log is being written by another request; send the batch again.")


def _advance_log_count(job_id: str, seen: int, end: int) -> bool:
    """Compare and set: only one of two copies of a batch arriving together moves the count (the other looks again)."""
    moved = db.session.execute(
        update(ProvisionerJob)
        .where(ProvisionerJob.id == job_id, ProvisionerJob.log_lines_received == seen)
        .values(log_lines_received=end)
        .execution_options(synchronize_session=False)
    )
    return rows_changed(moved) == 1


_job_masks = JobMasks()


def job_mask(job: ProvisionerJob) -> SecretMask:
    """What hides a job's secret values and their encoded forms in its output (app/provisioning/masking.py): built
    once per job and process (from the secrets of its first log batch's time), off the event loop."""

    def build() -> SecretMask:
        needles = secret_needles(handlers_for(job).secrets(job))
        return run_off_loop(lambda: build_mask(needles))

    return _job_masks.get(job.id, build)


def _log_row(job: ProvisionerJob, line: LogLine, output: str) -> dict[str, str] | None:
    if len(output) > MAX_LINE_CHARS:
        output = output[: MAX_LINE_CHARS - len(TRUNCATED_MARKER)] + TRUNCATED_MARKER
    size = len(output.encode())
    stage = line.stage[:128]
    if job.logs_overflowed:
        job.logs_dropped += 1
        return None
    if job.logs_length + size > MAX_JOB_LOG_BYTES:
        job.logs_overflowed = True
        job.logs_dropped += 1
        notice = f"Log limit of {MAX_JOB_LOG_BYTES // 1024} KiB reached: further lines of this job are not stored."
        return {"job_id": job.id, "source": "provisioner_daemon", "level": "warn", "stage": stage, "output": notice}
    job.logs_length += size
    return {"job_id": job.id, "source": line.source, "level": line.level, "stage": stage, "output": output}


def complete_job(daemon: ProvisionerDaemon, job_id: str, completion: JobCompletion) -> None:
    build = completion.workspace_build
    if _recorded_late(daemon, job_id, build.state if build is not None else None):
        return
    job = owned_running_job(daemon, job_id)
    handlers = handlers_for(job)
    if getattr(completion, handlers.result) is None:
        detail = f"A {job.type} job's completion must carry its {handlers.result} result."
        raise InvalidInput(detail, validations=[{"field": handlers.result, "detail": detail}])
    try:
        handlers.complete(job, completion)
    except (InvalidInput, Conflict) as exc:
        db.session.rollback()
        add_job_timings(job.id, completion.timings)
        finish_job(job, error=exc.message)
        return
    add_job_timings(job.id, completion.timings)
    if completion.workspace_build is not None and completion.workspace_build.review is not None:
        _await_confirmation(job)
        return
    finish_job(job)


def _recorded_late(daemon: ProvisionerDaemon, job_id: str, state: bytes | None) -> bool:
    """An outcome for a job of this daemon's that already ended (reaped while the daemon was cut off, or failed
    when it restarted): its job type keeps what must not be lost, once, and says so in the job's log. True when
    the outcome was taken this way (the daemon is done with it); False for a job still running."""
    job = db.session.get(ProvisionerJob, job_id)
    if job is None or job.completed_at is None or job.worker_id != daemon.id:
        return False  # the usual path answers: running, or not this daemon's
    said = handlers_for(job).late(job, state) if state else ""
    if said:
        add_notice(job, said)
    db.session.commit()
    if said:
        publish_job_notice(job.id)
    return True


def _await_confirmation(job: ProvisionerJob) -> None:
    """The daemon stopped before applying, for a person to confirm its plan: the job lets go of the daemon and
    waits (a cancel meanwhile ends it canceled, with the review kept for the record)."""
    now = utcnow()
    held = db.session.execute(
        update(ProvisionerJob)
        .where(ProvisionerJob.id == job.id, ProvisionerJob.completed_at.is_(None), ProvisionerJob.canceled_at.is_(None))
        .values(awaiting_confirmation_at=now, worker_id=None, updated_at=now)
        .execution_options(synchronize_session="fetch")
    )
    if rows_changed(held) != 1:
        finish_job(job)  # canceled while it planned
        return
    db.session.commit()
    publish_job_notice(job.id)


def fail_job(daemon: ProvisionerDaemon, job_id: str, failure: JobFailure) -> None:
    """The job ended without success; the state Terraform left is kept. A job someone canceled ends canceled
    (its interrupted Terraform is the expected outcome, not a failure to report)."""
    if _recorded_late(daemon, job_id, failure.state):
        return
    job = owned_running_job(daemon, job_id)
    # Terraform's error can quote what the log showed masked (a command line, a variable's value). The mask is made
    # with nothing written and the heartbeat stored, as in append_logs: making it may wait on a thread.
    db.session.commit()
    mask = job_mask(job)
    handlers_for(job).fail(job, failure)
    add_job_timings(job.id, failure.timings)
    if job.canceled_at is not None:
        finish_job(job)
        return
    error = mask.apply(failure.error) or "The provisioner daemon reported a failure without a message."
    finish_job(job, error=error, error_code=failure.error_code or None)


def finish_job(
    job: ProvisionerJob,
    *,
    error: str | None = None,
    error_code: str | None = None,
    still: Sequence[ColumnElement[bool]] = (),
) -> bool:
    """End the job, with whatever the session holds for it (state, resources, notices), by one conditional
    UPDATE: False (and nothing stored) when something else ended it first — the daemon, the reaper, a cancel —
    or when the conditions in ``still`` no longer hold."""
    now = utcnow()
    values: dict[str, object] = {
        "completed_at": now,
        "updated_at": now,
        # A pending job that ends (the reaper) counts as started now: its status reads "failed", not "pending".
        "started_at": func.coalesce(ProvisionerJob.started_at, now),
    }
    if error is not None:
        values.update(error=error[:4000], error_code=error_code)
    ended = db.session.execute(
        update(ProvisionerJob)
        .where(ProvisionerJob.id == job.id, ProvisionerJob.completed_at.is_(None), *still)
        .values(values)
        .execution_options(synchronize_session="fetch")
    )
    if rows_changed(ended) != 1:
        db.session.rollback()
        return False
    db.session.commit()
    _job_masks.forget(job.id)
    publish_job_notice(job.id, end=True)
    if error is not None:
        _report_failure(job)
    return True


def _report_failure(job: ProvisionerJob) -> None:
    """The job type's own reaction to a failure; a problem there must not undo or hide the failure itself."""
    try:
        handlers_for(job).failed(job)
    except Exception:
        db.session.rollback()
        log.exception("reporting the failure of job %s failed", job.id)


def fail_jobs_held_by(daemon_id: str, reason: str) -> int:
    jobs = db.session.scalars(
        select(ProvisionerJob).where(ProvisionerJob.worker_id == daemon_id, ProvisionerJob.completed_at.is_(None))
    ).all()
    for job in jobs:
        if job.status in (RUNNING, "canceling"):
            add_notice(job, reason)
            finish_job(job, error=reason)
    return len(jobs)


def add_notice(job: ProvisionerJob, reason: str) -> None:
    """A framed notice at the end of a job's log (the reaper's and the server's own words, not the daemon's)."""
    for output in ("", "=" * 60, reason, "=" * 60, ""):
        db.session.add(
            ProvisionerJobLog(
                job_id=job.id, source="provisioner_daemon", level="error", stage=STAGE_CLEANUP, output=output
            )
        )
