"""The RQ job function: acquire the job from the server, run it with Terraform, report the outcome.

RQ hands us only the job id. Everything else comes from the server at acquisition, which is also where the
server decides whether this daemon may have the job at all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.client import ProvisionerClient, ServerRefused
from workers.logship import LogShipper
from workers.metrics import JobMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DaemonContext:
    client: ProvisionerClient
    cache_dir: Path
    terraform_path: str | None = None
    # From the server: how long a canceled Terraform may take to stop before it is killed.
    force_cancel_seconds: float = 600.0
    metrics: JobMetrics = field(default_factory=JobMetrics)
    # Called when the server refuses the daemon's credential mid-job: the daemon must stop.
    on_fatal: Callable[[str], None] = lambda message: None


_context: DaemonContext | None = None
# The job this process is running, so a signal to the daemon can interrupt it.
_active: JobControl | None = None


def configure(context: DaemonContext) -> None:
    global _context
    _context = context


@dataclass
class JobOutcome:
    """What to tell the server: ``complete`` with a body, or ``fail`` with error, error_code and maybe state."""

    ok: bool
    body: dict[str, Any]


class JobControl:
    """Shared between the log shipper (which learns of cancels), the daemon's signal handlers (which stop it)
    and the Terraform run (which obeys both): cancel interrupts Terraform, force kills it."""

    def __init__(self, job_id: str = "") -> None:
        self.job_id = job_id
        self.canceled = threading.Event()
        # Set when the daemon itself stops the job (Ctrl-C), not the server: the job then ends as failed.
        self.shutdown_reason: str | None = None
        self._on_cancel: list[Callable[[], None]] = []
        self._on_force: list[Callable[[], None]] = []
        self._forced = False

    def on_cancel(self, callback: Callable[[], None], *, force: Callable[[], None] | None = None) -> None:
        self._on_cancel.append(callback)
        if force is not None:
            self._on_force.append(force)
        if self._forced and force is not None:
            force()
        elif self.canceled.is_set():
            callback()

    def cancel(self) -> None:
        self.canceled.set()
        for callback in list(self._on_cancel):
            callback()

    def force(self) -> None:
        self._forced = True
        self.canceled.set()
        for callback in list(self._on_force):
            callback()


def active_job() -> JobControl | None:
    return _active


_shutdown_reason: str | None = None


def interrupt(reason: str) -> None:
    """The daemon is stopping: cancel the job it runs (or is about to run) and end it with ``reason``."""
    global _shutdown_reason
    _shutdown_reason = reason
    active = _active
    if active is not None:
        active.shutdown_reason = reason
        active.cancel()


def run_provisioner_job(job_id: str) -> None:
    global _active
    context = _context
    if context is None:
        raise RuntimeError("the provisioner daemon was not configured")
    try:
        payload = context.client.acquire(job_id)
    except ServerRefused as exc:
        if exc.fatal:
            context.on_fatal(exc.message)
            return
        # Taken by another daemon, canceled, or not ours to run: the server's word is final.
        log.info("job %s not acquired: %s", job_id, exc.message)
        return
    from workers.flows import run_job

    log.info("running %s job %s", payload["type"], job_id)
    control = _active = JobControl(job_id)
    if _shutdown_reason:  # interrupted while acquiring: end the job at once, as interrupted
        control.shutdown_reason = _shutdown_reason
        control.cancel()
    began = time.monotonic()
    context.metrics.started()
    try:
        with LogShipper(context.client, job_id, on_cancel=control.cancel) as shipper:
            try:
                outcome = run_job(payload, context, shipper.add, control)
            except Exception as exc:  # never leave a job running because of a bug of ours
                log.exception("job %s crashed", job_id)
                outcome = JobOutcome(False, {"error": f"The provisioner daemon failed: {exc}"})
            if not outcome.ok and control.shutdown_reason:
                outcome.body["error"] = control.shutdown_reason
    finally:
        _active = None
    result = "succeeded" if outcome.ok else "canceled" if control.canceled.is_set() else "failed"
    context.metrics.finished(payload["type"], result, time.monotonic() - began)
    log.info("job %s %s after %.1f s", job_id, result, time.monotonic() - began)
    # Only after the last log line is in: the server refuses logs for a finished job.
    try:
        if outcome.ok:
            context.client.complete(job_id, outcome.body)
        else:
            context.client.fail(job_id, outcome.body)
    except ServerRefused as exc:
        if exc.fatal:
            context.on_fatal(exc.message)
            return
        log.warning("the server refused the outcome of job %s: %s", job_id, exc.message)
