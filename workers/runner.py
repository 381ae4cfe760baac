"""Running one job at a time: acquire it, run it with Terraform while its log ships, report the outcome.

A :class:`JobRunner` holds everything a daemon knows while it works — its client, settings, metrics, the job it is
running and whether it was told to stop — so signal handlers and the heartbeat thread reach the job through it.
Jobs come to it from Redis (an RQ worker, ``workers/rq_adapter.py``) or from ``POST /jobs/wait``; either way the
server has the last word on whether this daemon may have the job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from protocol.provisionerd import MAX_BATCH_LINES, AcquiredJob, JobCompletion, JobFailure, LogBatch
from workers.client import ProvisionerClient, ServerRefused
from workers.flows import run_job
from workers.job_control import JobControl, RunnerSettings
from workers.logship import LogShipper
from workers.metrics import JobMetrics
from workers.outbox import Outbox, Undelivered

log = logging.getLogger(__name__)

# Reporting an outcome to a server that does not answer: again soon, then no more often than this.
DELIVERY_RETRY_SECONDS = (1.0, 30.0)


class JobRunner:
    def __init__(
        self,
        client: ProvisionerClient,
        settings: RunnerSettings,
        *,
        metrics: JobMetrics | None = None,
        on_fatal: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.metrics = metrics or JobMetrics()
        # Called when the server refuses the daemon's credential mid-job: the daemon must stop.
        self.on_fatal = on_fatal
        self.active: JobControl | None = None
        self.shutdown_reason: str | None = None
        self._forced = False
        self._busy = threading.Event()
        # Jobs acquired and run to their end (not those another daemon took first): what --once counts.
        self.jobs_run = 0

    @property
    def busy(self) -> bool:
        """Between taking a job (acquisition included) and reporting its outcome."""
        return self._busy.is_set()

    def interrupt(self, reason: str) -> None:
        """The daemon is stopping: cancel the job it runs (or is about to run) and end it with ``reason``."""
        self.shutdown_reason = reason
        active = self.active
        if active is not None:
            active.shutdown_reason = reason
            active.cancel()

    def force(self) -> None:
        """Stop now: kill the running Terraform (and stop trying to report to a server that does not answer)."""
        self._forced = True
        active = self.active
        if active is not None:
            log.warning("killing Terraform of job %s", active.job_id)
            active.force()

    def run_job_id(self, job_id: str) -> bool:
        """A queue entry or the server's offer said "job <id>": acquire it (or learn it is not ours) and run it.
        False when it was not acquired."""
        self._busy.set()
        try:
            try:
                job = self.client.acquire(job_id)
            except ServerRefused as exc:
                if exc.fatal:
                    self.on_fatal(exc.message)
                else:  # taken by another daemon, canceled, or not ours to run: the server's word is final
                    log.info("job %s not acquired: %s", job_id, exc.message)
                return False
            self._run(job)
            self.jobs_run += 1
            return True
        finally:
            self._busy.clear()

    def _run(self, job: AcquiredJob) -> None:
        log.info("running %s job %s", job.type, job.id)
        control = self.active = JobControl(job.id)
        if self.shutdown_reason:  # interrupted while acquiring: end the job at once, as interrupted
            control.shutdown_reason = self.shutdown_reason
            control.cancel()
        began = time.monotonic()
        self.metrics.started()
        try:
            # Fenced: a job the server says is no longer ours has its Terraform killed at once (another daemon may
            # be applying to the same workspace); out of touch, we stop it gracefully, before the server's lease ends.
            shipper = LogShipper(
                self.client, job.id, on_cancel=control.cancel,
                on_lost=lambda reason, at_once: control.force() if at_once else control.cancel(),
                lease_seconds=job.lease_seconds, first_seq=job.first_log_seq,
            )  # fmt: skip
            with shipper:
                try:
                    outcome = run_job(job, self.settings, shipper.add, control, self._quota_check(job.id))
                except Exception as exc:  # never leave a job running because of a bug of ours
                    log.exception("job %s crashed", job.id)
                    outcome = JobFailure(error=f"The provisioner daemon failed: {exc}")
                if isinstance(outcome, JobFailure) and control.shutdown_reason:
                    outcome = replace(outcome, error=control.shutdown_reason)
                self._keep(Undelivered(job.id, outcome))  # on disk at once: the log's last lines may take a while
            if shipper.lost is not None:  # whatever Terraform did before it stopped is still reported
                outcome = JobFailure(
                    error=f"The provisioner daemon stopped the job: {shipper.lost}.", state=_state(outcome)
                )
        finally:
            self.active = None
        ok = not isinstance(outcome, JobFailure)
        result = "succeeded" if ok else "canceled" if control.canceled.is_set() else "failed"
        self.metrics.finished(job.type, result, time.monotonic() - began)
        log.info("job %s %s after %.1f s", job.id, result, time.monotonic() - began)
        # Only after the last log line is in: the server refuses logs for a finished job. Kept on disk first, so
        # that a server away for long (or this daemon stopping meanwhile) loses nothing.
        first_seq, lines = shipper.unsent()
        self.deliver(Undelivered(job.id, outcome, first_seq, lines))

    def _quota_check(self, job_id: str) -> Callable[[int], str]:
        def check(daily_cost: int) -> str:
            answer = self.client.commit_quota(job_id, daily_cost)
            return "" if answer.ok else answer.message or "The build would take its owner over their quota."

        return check

    def deliver_kept(self) -> None:
        """Report what an earlier run of this daemon kept because the server could not be reached."""
        for entry in Outbox(self.settings.outbox).pending():
            log.info("reporting job %s, kept from an earlier run", entry.job_id)
            self.deliver(entry, keep=False)

    def deliver(self, entry: Undelivered, *, keep: bool = True) -> None:
        """Send the held log lines and the outcome, trying for as long as it takes (until the daemon is told to
        stop, when the entry stays on disk for its next start); the entry goes once the server has answered."""
        outbox = Outbox(self.settings.outbox)
        if keep:
            self._keep(entry)
        delay, longest = DELIVERY_RETRY_SECONDS
        while True:
            try:
                self._send(entry)
            except ServerRefused as exc:
                if exc.fatal:
                    self.on_fatal(exc.message)
                    return  # kept: a daemon started again with a working credential reports it
                log.warning("the server refused the outcome of job %s: %s", entry.job_id, exc.message)
            except ConnectionError as exc:
                if self.shutdown_reason is not None or self._forced:
                    log.warning("job %s: the outcome is kept in %s for the daemon's next start", entry.job_id, outbox)
                    return
                log.warning(
                    "cannot report job %s (%s); trying again in %.0f s (kept on disk meanwhile)",
                    entry.job_id,
                    exc,
                    delay,
                )
                time.sleep(delay)
                delay = min(delay * 2, longest)
                continue
            outbox.forget(entry.job_id)
            return

    def _keep(self, entry: Undelivered) -> None:
        try:
            Outbox(self.settings.outbox).keep(entry)
        except OSError as exc:  # a full disk must not stop the report itself
            log.error("could not keep the outcome of job %s on disk (%s); reporting it anyway", entry.job_id, exc)

    def _send(self, entry: Undelivered) -> None:
        for start in range(0, len(entry.lines), MAX_BATCH_LINES):
            chunk = entry.lines[start : start + MAX_BATCH_LINES]
            try:
                self.client.post_logs(entry.job_id, LogBatch(logs=chunk, first_seq=entry.first_seq + start))
            except ServerRefused as exc:  # the job ended meanwhile: the outcome may still be recorded (late)
                if exc.fatal:
                    raise
                log.warning("the server refused the last log lines of job %s: %s", entry.job_id, exc.message)
                break
        if isinstance(entry.outcome, JobFailure):
            self.client.fail(entry.job_id, entry.outcome)
        else:
            self.client.complete(entry.job_id, entry.outcome)


def _state(outcome: JobCompletion | JobFailure) -> bytes | None:
    if isinstance(outcome, JobFailure):
        return outcome.state
    return outcome.workspace_build.state if outcome.workspace_build is not None else None
