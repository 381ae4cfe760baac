"""The RQ job function: acquire the job from the server, run it with Terraform, report the outcome.

RQ hands us only the job id. Everything else comes from the server at acquisition, which is also where the
server decides whether this daemon may have the job at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.client import ProvisionerClient, ServerRefused
from workers.logship import LogShipper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DaemonContext:
    client: ProvisionerClient
    cache_dir: Path
    terraform_path: str | None = None


_context: DaemonContext | None = None


def configure(context: DaemonContext) -> None:
    global _context
    _context = context


@dataclass
class JobOutcome:
    """What to tell the server: ``complete`` with a body, or ``fail`` with error, error_code and maybe state."""

    ok: bool
    body: dict[str, Any]


class JobControl:
    """Shared between the log shipper (which learns of cancels) and the Terraform run (which obeys them)."""

    def __init__(self) -> None:
        self.canceled = threading.Event()
        self._on_cancel: list[Callable[[], None]] = []

    def on_cancel(self, callback: Callable[[], None]) -> None:
        self._on_cancel.append(callback)
        if self.canceled.is_set():
            callback()

    def cancel(self) -> None:
        self.canceled.set()
        for callback in list(self._on_cancel):
            callback()


def run_provisioner_job(job_id: str) -> None:
    context = _context
    if context is None:
        raise RuntimeError("the provisioner daemon was not configured")
    try:
        payload = context.client.acquire(job_id)
    except ServerRefused as exc:
        # Taken by another daemon, canceled, or not ours to run: the server's word is final.
        log.info("job %s not acquired: %s", job_id, exc.message)
        return
    from workers.flows import run_job

    control = JobControl()
    with LogShipper(context.client, job_id, on_cancel=control.cancel) as shipper:
        try:
            outcome = run_job(payload, context, shipper.add, control)
        except Exception as exc:  # never leave a job running because of a bug of ours
            log.exception("job %s crashed", job_id)
            outcome = JobOutcome(False, {"error": f"The provisioner daemon failed: {exc}"})
    # Only after the last log line is in: the server refuses logs for a finished job.
    try:
        if outcome.ok:
            context.client.complete(job_id, outcome.body)
        else:
            context.client.fail(job_id, outcome.body)
    except ServerRefused as exc:
        log.warning("the server refused the outcome of job %s: %s", job_id, exc.message)
