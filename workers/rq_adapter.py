"""RQ, adapted to a provisioner daemon: the worker runs our one job function and stops the way an operator expects.

RQ has no public hook for either, so this module is the only place that touches RQ's internals — the private
``_install_signal_handlers`` (RQ installs its own at the start of ``work``) and ``_stop_requested`` (RQ's "finish
this job, then stop" flag). ``tests/workers/test_rq_adapter.py`` fails loudly when an RQ release changes them;
``pyproject.toml`` pins the RQ major version it was tested with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NoReturn

import redis
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


# Waiting for Redis to come back: the first retry soon, then no more often than this.
REDIS_RETRY_SECONDS = (1.0, 10.0)
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class QuietRedisOutages(logging.Filter):
    """RQ's worker logs a Redis outage as a traceback ("unhandled exception, quitting") and then every 2 s while
    it retries; the daemon says it once, in a sentence (RedisJobSource), so RQ's copies are trimmed."""

    def __init__(self) -> None:
        super().__init__()
        self._retrying = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], REDIS_DOWN):
            record.exc_info, record.exc_text = None, None
        retrying = "could not connect to Redis" in record.getMessage()
        repeated = retrying and self._retrying
        self._retrying = retrying
        return not repeated


QUIET_REDIS_OUTAGES = QuietRedisOutages()


class RedisJobSource:
    """Jobs from RQ, through Redis outages: when Redis stops answering (at start, while idle, or as a job ends and
    RQ does its bookkeeping), the daemon says so, waits for Redis and serves again with a fresh worker. It never
    exits because Redis is away; the job it ran is reported over HTTP, which does not need Redis."""

    def __init__(
        self, make_worker: Callable[[int], ProvisionerWorker], connection: redis.Redis, runner: JobRunner
    ) -> None:
        self.make_worker = make_worker  # the argument counts the workers made: each needs a name of its own
        self.connection = connection
        self.runner = runner
        self.worker: ProvisionerWorker | None = None
        self._stop = False
        logging.getLogger("rq.worker").addFilter(QUIET_REDIS_OUTAGES)  # once: a filter already added is not again

    @property
    def busy(self) -> bool:
        if self.runner.busy:
            return True
        try:
            return self.worker is not None and self.worker.busy
        except redis.exceptions.RedisError:  # asked from a signal handler while Redis is away: it runs nothing
            return False

    def stop_after_job(self) -> None:
        self._stop = True
        if self.worker is not None:
            self.worker.stop_after_job()

    @staticmethod
    def stop_now() -> NoReturn:
        raise StopRequested

    def serve(self) -> None:
        generation = 0
        try:
            while not self._stop:
                try:
                    self.worker = self.make_worker(generation)
                    generation += 1
                    self.worker.serve()
                    return
                except REDIS_DOWN as exc:
                    if self._stop:
                        return
                    log.warning("Redis is not answering (%s); waiting for it, then taking jobs again", exc)
                    self._wait_for_redis()
                    log.info("Redis answers again; taking jobs")
        except StopRequested:
            return

    def _wait_for_redis(self) -> None:
        delay, longest = REDIS_RETRY_SECONDS
        while not self._stop:
            time.sleep(delay)
            try:
                self.connection.ping()
                return
            except REDIS_DOWN:
                delay = min(delay * 2, longest)
