"""A provisioner daemon: registers with the server, then runs one RQ worker on the queues of its tag sets.

One process = one RQ worker = one build at a time. It never touches the database (DESIGN.md, the one rule);
the server gives it the queue names at registration and decides every acquisition. While idle it calls in every
few seconds, so the server knows it is alive and it learns at once when its credential is revoked.

Signals (as `coder provisioner start`): SIGTERM finishes the current job, then exits; SIGINT cancels the job
(Terraform is interrupted, its state kept) and exits; a second SIGINT kills Terraform at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import redis
from rq import Queue
from rq.exceptions import StopRequested
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker, WorkerStatus

from workers import jobs
from workers.client import ProvisionerClient, ServerRefused
from workers.metrics import JobMetrics

log = logging.getLogger(__name__)
RUN_JOB_FUNCTION = "workers.jobs.run_provisioner_job"
EXIT_OK, EXIT_REFUSED = 0, 1
REGISTER_RETRY_SECONDS = 5
SHUTDOWN_REASON = "The provisioner daemon was stopped ({signal}) while running this job."


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slipway" / "provisioner"


@dataclass(frozen=True)
class DaemonConfig:
    url: str
    # One credential header: a PSK, a provisioner key or a user token (workers/client.py builds them).
    credential: dict[str, str]
    # None: use the Redis address the server advertises at registration.
    redis_url: str | None = None
    name: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    tags: dict[str, str] = field(default_factory=dict)
    cache_dir: Path = field(default_factory=default_cache_dir)
    terraform_path: str | None = None
    prometheus_address: str | None = None


class ProvisionerWorker(SimpleWorker):
    """An RQ worker that runs our job function and nothing else, and stops the way an operator expects."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusal: str | None = None
        self._interrupted = False

    def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
        if job.func_name != RUN_JOB_FUNCTION:
            log.error("refused RQ job %s: it names %r, not the provisioner job function", job.id, job.func_name)
            self.handle_job_failure(job, queue, exc_string=f"refused: {job.func_name!r} is not allowed")
            return False
        result: bool = super().perform_job(job, queue, execution)
        return result

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigint)
        # From our own heartbeat thread: the server refused the credential.
        signal.signal(signal.SIGUSR1, self._on_refused)

    def _busy(self) -> bool:
        # RQ marks the worker busy before it calls our job function, so this covers acquisition too.
        return bool(self.get_state() == WorkerStatus.BUSY)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupted:
            self._force("SIGTERM")
            return
        if not self._busy():
            raise StopRequested
        self._stop_requested = True
        log.warning("SIGTERM: finishing the current job, then exiting (Ctrl-C cancels it)")

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if not self._busy():
            raise StopRequested
        if self._interrupted:
            self._force("SIGINT")
            return
        self._interrupted = self._stop_requested = True
        log.warning("SIGINT: canceling the current job and exiting (Ctrl-C again kills Terraform now)")
        reason = SHUTDOWN_REASON.format(signal="SIGINT")
        # Not inside the signal handler: cancelling takes locks the interrupted code may hold.
        threading.Thread(target=jobs.interrupt, args=(reason,), daemon=True).start()

    def _force(self, name: str) -> None:
        active = jobs.active_job()
        if active is not None:
            log.warning("%s again: killing Terraform of job %s", name, active.job_id)
            threading.Thread(target=active.force, daemon=True).start()

    def _on_refused(self, signum: int, frame: FrameType | None) -> None:
        if not self._busy():
            raise StopRequested
        self._stop_requested = True  # the job's own calls are refused too; it ends on its own

    def refuse(self, message: str) -> None:
        """The server refused our credential (from any thread): stop, and exit non-zero."""
        if self.refusal is None:
            self.refusal = message
            log.error("the server refused this daemon: %s", message)
            os.kill(os.getpid(), signal.SIGUSR1)


def _heartbeats(client: ProvisionerClient, worker: ProvisionerWorker, interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        try:
            client.heartbeat()
        except ServerRefused as exc:
            if exc.status in (401, 403, 404):  # revoked, demoted, or forgotten: none of it heals by waiting
                worker.refuse(exc.message)
                return
            log.warning("heartbeat refused: %s", exc.message)
        except ConnectionError as exc:
            log.warning("heartbeat failed: %s", exc)


def daemon_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slipway")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _register(client: ProvisionerClient, config: DaemonConfig) -> dict[str, Any]:
    """Register, waiting for a server that is not up yet (a daemon may well start first); Ctrl-C ends the wait."""
    while True:
        try:
            reply: dict[str, Any] = client.register(config.name, config.tags, daemon_version())
            return reply
        except ConnectionError as exc:
            log.warning("%s; retrying in %d s", exc, REGISTER_RETRY_SECONDS)
            time.sleep(REGISTER_RETRY_SECONDS)


def run_daemon(config: DaemonConfig, *, burst: bool = False) -> int:
    """Serve jobs until stopped; the exit status is 1 when the server refused this daemon, else 0."""
    client = ProvisionerClient(config.url, credential=config.credential)
    stop_heartbeats = threading.Event()
    connection: redis.Redis | None = None
    try:
        try:
            registration = _register(client, config)
        except ServerRefused as exc:
            log.error("the server refused to register this daemon: %s", exc.message)
            return EXIT_REFUSED
        connection = redis.Redis.from_url(config.redis_url or registration["redis_url"])
        config.cache_dir.mkdir(parents=True, exist_ok=True)
        metrics = JobMetrics()
        if config.prometheus_address:
            metrics.serve(config.prometheus_address)
        queues = [Queue(name, connection=connection, serializer=JSONSerializer) for name in registration["queues"]]
        worker = ProvisionerWorker(
            queues,
            name=f"{config.name}.{registration['daemon_id'][:8]}.{os.getpid()}",
            connection=connection,
            serializer=JSONSerializer,
        )
        jobs.configure(
            jobs.DaemonContext(
                client=client,
                cache_dir=config.cache_dir,
                terraform_path=config.terraform_path,
                force_cancel_seconds=float(registration.get("force_cancel_seconds", 600)),
                metrics=metrics,
                on_fatal=worker.refuse,
            )
        )
        heartbeat = threading.Thread(
            target=_heartbeats,
            args=(client, worker, float(registration.get("heartbeat_seconds", 10)), stop_heartbeats),
            name="heartbeat",
            daemon=True,
        )
        heartbeat.start()
        log.info("provisioner daemon %s (pid %d) listening on %d queue(s)", config.name, os.getpid(), len(queues))
        worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
        return EXIT_REFUSED if worker.refusal else EXIT_OK
    finally:
        stop_heartbeats.set()
        client.close()
        if connection is not None:
            connection.close()
