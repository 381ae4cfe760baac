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

from protocol.provisionerd import AcquiredJob, JobFailure
from workers.client import ProvisionerClient, ServerRefused
from workers.flows import run_job
from workers.job_control import JobControl, RunnerSettings
from workers.logship import LogShipper
from workers.metrics import JobMetrics

log = logging.getLogger(__name__)


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
        """Stop now: kill the running Terraform."""
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
            # Fenced: a job that is no longer ours (reaped, or we lost touch) has its Terraform killed at once, not
            # stopped gracefully: another daemon may already be applying to the same workspace.
            shipper = LogShipper(
                self.client, job.id, on_cancel=control.cancel, on_lost=lambda reason: control.force(),
                lease_seconds=job.lease_seconds,
            )  # fmt: skip
            with shipper:
                try:
                    outcome = run_job(job, self.settings, shipper.add, control)
                except Exception as exc:  # never leave a job running because of a bug of ours
                    log.exception("job %s crashed", job.id)
                    outcome = JobFailure(error=f"The provisioner daemon failed: {exc}")
                if isinstance(outcome, JobFailure) and control.shutdown_reason:
                    outcome = replace(outcome, error=control.shutdown_reason)
            if shipper.lost is not None:
                outcome = JobFailure(error=f"The provisioner daemon stopped the job: {shipper.lost}.")
        finally:
            self.active = None
        ok = not isinstance(outcome, JobFailure)
        result = "succeeded" if ok else "canceled" if control.canceled.is_set() else "failed"
        self.metrics.finished(job.type, result, time.monotonic() - began)
        log.info("job %s %s after %.1f s", job.id, result, time.monotonic() - began)
        # Only after the last log line is in: the server refuses logs for a finished job.
        try:
            if isinstance(outcome, JobFailure):
                self.client.fail(job.id, outcome)
            else:
                self.client.complete(job.id, outcome)
        except ServerRefused as exc:
            if exc.fatal:
                self.on_fatal(exc.message)
                return
            log.warning("the server refused the outcome of job %s: %s", job.id, exc.message)
