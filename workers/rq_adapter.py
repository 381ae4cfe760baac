"""RQ, adapted to a provisioner daemon: the worker runs our one job function and stops the way an operator expects.

RQ has no public hook for either, so this module is the only place that touches RQ's internals — the private
``_install_signal_handlers`` (RQ installs its own at the start of ``work``) and ``_stop_requested`` (RQ's "finish
this job, then stop" flag). ``tests/workers/test_rq_adapter.py`` fails loudly when an RQ release changes them;
``pyproject.toml`` pins the RQ major version it was tested with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NoReturn

from rq import Queue
from rq.exceptions import StopRequested
from rq.job import Job
from rq.worker import SimpleWorker, WorkerStatus

from protocol.provisionerd import RUN_JOB_FUNCTION
from workers.jobs import current_runner
from workers.runner import JobRunner

log = logging.getLogger(__name__)

# What the adapter relies on; the test checks that RQ still has each of them.
RQ_INTERNALS = ("_install_signal_handlers", "_stop_requested")


class ProvisionerWorker(SimpleWorker):
    """One RQ worker per daemon, running jobs in its own process (no fork: the runner's state is shared)."""

    def __init__(self, *args: Any, runner: JobRunner, install_signals: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runner = runner
        self.burst = False
        self.once = False
        self.idle_exit_seconds: int | None = None
        self._install_daemon_signals = install_signals

    def serve(self) -> None:
        # RQ's max_idle_time ends the loop once a dequeue waited that long with nothing to take.
        self.work(burst=self.burst, logging_level="WARNING", with_scheduler=False, max_idle_time=self.idle_exit_seconds)
        if self.once and self.runner.jobs_run:
            log.info("exiting after one job (--once)")
        elif self.idle_exit_seconds is not None and not self._stop_requested:
            log.info("exiting: no job for %d s (--idle-exit)", self.idle_exit_seconds)

    def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
        if job.func_name != RUN_JOB_FUNCTION:
            log.error("refused RQ job %s: it names %r, not the provisioner job function", job.id, job.func_name)
            self.handle_job_failure(job, queue, exc_string=f"refused: {job.func_name!r} is not allowed")
            return False
        token = current_runner.set(self.runner)
        try:
            result: bool = super().perform_job(job, queue, execution)
        finally:
            current_runner.reset(token)
        if self.once and self.runner.jobs_run:
            # A queue entry whose job another daemon took first does not count: --once waits for one it runs.
            self._stop_requested = True
        return result

    def _install_signal_handlers(self) -> None:
        # RQ calls this as `work` starts; the daemon's handlers replace RQ's (see workers/daemon.py).
        self._install_daemon_signals()

    @property
    def busy(self) -> bool:
        # RQ marks the worker busy before it calls our job function, so this covers acquisition too.
        return self.runner.busy or bool(self.get_state() == WorkerStatus.BUSY)

    def stop_after_job(self) -> None:
        self._stop_requested = True

    @staticmethod
    def stop_now() -> NoReturn:
        """From a signal handler while idle: RQ's loop ends on this exception (its blocking dequeue included)."""
        raise StopRequested
