"""A provisioner daemon: registers with the server, then takes jobs one at a time until it is stopped.

One process = one build at a time. It never touches the database (DESIGN.md, the one rule). Where its jobs come
from is the server's decision at registration: a daemon the server trusts with Redis (built-in daemons, and those
whose credential the operator named with ``--provisioner-trust-redis``) runs an RQ worker on its queues; any other
daemon waits for jobs over HTTP (``POST /jobs/wait``), which is as fast and gives it no way into Redis. While idle it
calls in every few seconds, so the server knows it is alive and it learns at once when its credential is revoked.

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
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import FrameType
from typing import NoReturn, Protocol

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from protocol.provisionerd import Registered, Registration
from workers.client import ProvisionerClient, ServerRefused
from workers.identity import claim_identity
from workers.job_control import RunnerSettings
from workers.metrics import JobMetrics
from workers.provider_zygote import ProviderZygote
from workers.rq_adapter import ProvisionerWorker, RedisJobSource
from workers.runner import JobRunner
from workers.terraform import TerraformNotFoundError, find_terraform
from workers.terraform.binary import TerraformVersion, terraform_version
from workers.terraform.init_cache import DEFAULT_MAX_BYTES

log = logging.getLogger(__name__)
EXIT_OK, EXIT_REFUSED = 0, 1
REGISTER_RETRY_SECONDS = 5
# How long one POST /jobs/wait is held by the server when no job comes; the daemon then asks again.
WAIT_SECONDS = 25
SHUTDOWN_REASON = "The provisioner daemon was stopped ({signal}) while running this job."


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slipway" / "provisioner"


@dataclass(frozen=True)
class DaemonConfig:
    url: str
    # One credential header: a PSK, a provisioner key or a user token (workers/client.py builds them).
    credential: dict[str, str]
    # None: use the Redis address the server hands out at registration (if it trusts this daemon with Redis).
    redis_url: str | None = None
    name: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    tags: dict[str, str] = field(default_factory=dict)
    # The organisation whose jobs it runs, by name or id ("": the default one, or its provisioner key's).
    organization: str = ""
    cache_dir: Path = field(default_factory=default_cache_dir)
    terraform_path: str | None = None
    init_cache_bytes: int = DEFAULT_MAX_BYTES
    prometheus_address: str | None = None
    # For autoscalers: exit 0 after one job (a Kubernetes Job per build), or after this long without one.
    once: bool = False
    idle_exit_seconds: int | None = None


class DaemonStopped(Exception):
    """Raised by a signal handler while the daemon waits for work: it ends the wait at once."""


class JobSource(Protocol):
    """Where jobs come from; it runs them through the runner until stopped."""

    @property
    def busy(self) -> bool: ...

    def serve(self) -> None: ...

    def stop_after_job(self) -> None: ...

    def stop_now(self) -> NoReturn: ...


class HttpJobSource:
    """Waits for jobs with ``POST /jobs/wait``: the server offers a pending job, which the daemon acquires."""

    def __init__(
        self,
        runner: JobRunner,
        signals: DaemonSignals,
        *,
        burst: bool = False,
        once: bool = False,
        idle_exit_seconds: int | None = None,
    ) -> None:
        self.runner = runner
        self.signals = signals
        self.burst = burst
        self.once = once
        self.idle_exit_seconds = idle_exit_seconds
        self._stop = False

    @property
    def busy(self) -> bool:
        return self.runner.busy

    def stop_after_job(self) -> None:
        self._stop = True

    def stop_now(self) -> NoReturn:
        raise DaemonStopped

    def _wait_seconds(self, idle_since: float) -> int | None:
        """How long the next wait for a job may be held; None when --once or --idle-exit says to exit now."""
        if self.once and self.runner.jobs_run:
            log.info("exiting after one job (--once)")
            return None
        wait = 0 if self.burst else WAIT_SECONDS
        if self.idle_exit_seconds is None:
            return wait
        left = self.idle_exit_seconds - (time.monotonic() - idle_since)
        if left <= 0:
            log.info("exiting: no job for %d s (--idle-exit)", self.idle_exit_seconds)
            return None
        return min(wait, max(1, int(left)))

    def serve(self) -> None:
        self.signals.install()
        outage_logged = False
        refused_offer: str | None = None
        try:
            idle_since = time.monotonic()
            while not self._stop and self.signals.refusal is None:
                wait = self._wait_seconds(idle_since)
                if wait is None:
                    return
                try:
                    offer = self.runner.client.wait_for_job(wait)
                except ConnectionError as exc:  # the server is away: wait for it, never give up
                    if not outage_logged:
                        log.warning("waiting for the server: %s", exc)
                        outage_logged = True
                    time.sleep(REGISTER_RETRY_SECONDS)
                    continue
                except ServerRefused as exc:
                    if exc.fatal or exc.status in (403, 404):
                        self.signals.refuse(exc.message)
                        return
                    log.warning("the server refused to hand out a job: %s", exc.message)
                    time.sleep(REGISTER_RETRY_SECONDS)
                    continue
                if outage_logged:
                    log.info("the server answers again")
                    outage_logged = False
                if offer is None:
                    if self.burst:
                        return
                    continue
                # Another daemon may acquire it first: then the next wait offers the next job at once. The same
                # job offered again after a refusal would mean the server and this daemon disagree: slow down.
                if offer.job_id == refused_offer:
                    time.sleep(REGISTER_RETRY_SECONDS)
                refused_offer = None if self.runner.run_job_id(offer.job_id) else offer.job_id
                idle_since = time.monotonic()
        except DaemonStopped:
            return


class DaemonSignals:
    """SIGTERM, SIGINT and the heartbeat's "refused" (SIGUSR1, to reach the main thread) for any job source."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.source: JobSource | None = None
        self.refusal: str | None = None
        self._interrupted = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGUSR1, self._on_refused)

    def _source(self) -> JobSource:
        assert self.source is not None  # noqa: S101 - installed only once a source exists
        return self.source

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupted:
            self._force("SIGTERM")
            return
        if not self._source().busy:
            self._source().stop_now()
        self._source().stop_after_job()
        log.warning("SIGTERM: finishing the current job, then exiting (Ctrl-C cancels it)")

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if not self._source().busy:
            self._source().stop_now()
        if self._interrupted:
            self._force("SIGINT")
            return
        self._interrupted = True
        self._source().stop_after_job()
        log.warning("SIGINT: canceling the current job and exiting (Ctrl-C again kills Terraform now)")
        reason = SHUTDOWN_REASON.format(signal="SIGINT")
        # Not inside the signal handler: cancelling takes locks the interrupted code may hold.
        threading.Thread(target=self.runner.interrupt, args=(reason,), daemon=True).start()

    def _force(self, name: str) -> None:
        log.warning("%s again: stopping now", name)
        threading.Thread(target=self.runner.force, daemon=True).start()

    def _on_refused(self, signum: int, frame: FrameType | None) -> None:
        if not self._source().busy:
            self._source().stop_now()
        self._source().stop_after_job()  # the job's own calls are refused too; it ends on its own

    def refuse(self, message: str) -> None:
        """The server refused our credential (from any thread): stop, and exit non-zero."""
        if self.refusal is None:
            self.refusal = message
            log.error("the server refused this daemon: %s", message)
            os.kill(os.getpid(), signal.SIGUSR1)


def _heartbeats(client: ProvisionerClient, signals: DaemonSignals, interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        try:
            client.heartbeat()
        except ServerRefused as exc:
            if exc.status in (401, 403, 404):  # revoked, demoted, or forgotten: none of it heals by waiting
                signals.refuse(exc.message)
                return
            log.warning("heartbeat refused: %s", exc.message)
        except ConnectionError as exc:
            log.warning("heartbeat failed: %s", exc)


def daemon_version() -> str:
    try:
        return version("slipway")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _register(client: ProvisionerClient, config: DaemonConfig, instance_id: str) -> Registered:
    """Register, waiting for a server that is not up yet (a daemon may well start first); Ctrl-C ends the wait."""
    while True:
        try:
            ephemeral = config.once or config.idle_exit_seconds is not None
            terraform = _terraform_of(config)
            registration = Registration(
                name=config.name, tags=config.tags, version=daemon_version(), ephemeral=ephemeral,
                terraform_binary=terraform.program, terraform_version=terraform.version, instance_id=instance_id,
                organization=config.organization,
            )  # fmt: skip
            return client.register(registration)
        except ConnectionError as exc:
            log.warning("%s; retrying in %d s", exc, REGISTER_RETRY_SECONDS)
            time.sleep(REGISTER_RETRY_SECONDS)


def _terraform_of(config: DaemonConfig) -> TerraformVersion:
    try:
        return terraform_version(find_terraform(config.terraform_path))
    except TerraformNotFoundError as exc:  # every job will fail and say so; the daemon still shows up, unable
        log.error("%s", exc)
        return TerraformVersion("", "")


def _redis_source(
    registration: Registered, config: DaemonConfig, runner: JobRunner, signals: DaemonSignals, connection: redis.Redis,
    *, burst: bool,
) -> RedisJobSource:  # fmt: skip
    queue_names = registration.queues
    log.info("provisioner daemon %s (pid %d) listening on %d queue(s)", config.name, os.getpid(), len(queue_names))

    def make_worker(generation: int) -> ProvisionerWorker:
        # RQ refuses a name a worker that vanished with Redis may still hold: each worker after an outage gets its own.
        suffix = f".{generation}" if generation else ""
        worker = ProvisionerWorker(
            [Queue(name, connection=connection, serializer=JSONSerializer) for name in queue_names],
            name=f"{config.name}.{registration.daemon_id[:8]}.{os.getpid()}{suffix}",
            connection=connection,
            serializer=JSONSerializer,
            runner=runner,
            install_signals=signals.install,
        )
        worker.burst, worker.once, worker.idle_exit_seconds = burst, config.once, config.idle_exit_seconds
        return worker

    return RedisJobSource(make_worker, connection, runner)


def run_daemon(config: DaemonConfig, *, burst: bool = False) -> int:
    """Serve jobs until stopped; the exit status is 1 when the server refused this daemon, else 0."""
    client = ProvisionerClient(config.url, credential=config.credential)
    stop_heartbeats = threading.Event()
    connection: redis.Redis | None = None
    zygote: ProviderZygote | None = None
    identity = claim_identity(config.cache_dir, config.name)
    try:
        try:
            registration = _register(client, config, identity.id)
        except ServerRefused as exc:
            log.error("the server refused to register this daemon: %s", exc.message)
            return EXIT_REFUSED
        metrics = JobMetrics()
        if config.prometheus_address:
            metrics.serve(config.prometheus_address)
        # Started now, ready well before most first jobs; a job that comes sooner starts its provider as before.
        zygote = ProviderZygote(config.cache_dir / "coder-provider" / "home")
        zygote.start()
        settings = RunnerSettings(
            config.cache_dir, config.terraform_path, float(registration.force_cancel_seconds), config.init_cache_bytes,
            plugin_cache_dir=config.cache_dir / "plugins" / identity.id,
            outbox_dir=config.cache_dir / "outbox" / identity.id, provider_zygote=zygote,
        )  # fmt: skip
        runner = JobRunner(client, settings, metrics=metrics)
        signals = DaemonSignals(runner)
        runner.on_fatal = signals.refuse
        runner.deliver_kept()  # outcomes an earlier run could not report, before any new job
        redis_url = registration.redis_url and (config.redis_url or registration.redis_url)
        source: JobSource
        if registration.queues and redis_url:
            connection = redis.Redis.from_url(redis_url)
            source = _redis_source(registration, config, runner, signals, connection, burst=burst)
        else:
            if config.redis_url:
                log.warning("the server serves this daemon over HTTP: --redis-url is not used")
            log.info("provisioner daemon %s (pid %d) waiting for jobs over HTTP", config.name, os.getpid())
            source = HttpJobSource(
                runner, signals, burst=burst, once=config.once, idle_exit_seconds=config.idle_exit_seconds
            )
        signals.source = source
        heartbeat = threading.Thread(
            target=_heartbeats,
            args=(client, signals, float(registration.heartbeat_seconds), stop_heartbeats),
            name="heartbeat",
            daemon=True,
        )
        heartbeat.start()
        source.serve()
        return EXIT_REFUSED if signals.refusal else EXIT_OK
    finally:
        stop_heartbeats.set()
        client.close()
        if zygote is not None:
            zygote.stop()
        identity.release()
        if connection is not None:
            connection.close()
