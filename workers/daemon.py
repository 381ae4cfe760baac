"""A provisioner daemon: registers with the server, then runs one RQ worker on the queues of its tag sets.

One process = one RQ worker = one build at a time. It never touches the database (DESIGN.md, the one rule);
the server gives it the queue names at registration and decides every acquisition.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker

from workers import jobs
from workers.client import ProvisionerClient

log = logging.getLogger(__name__)
RUN_JOB_FUNCTION = "workers.jobs.run_provisioner_job"


@dataclass(frozen=True)
class DaemonConfig:
    url: str
    psk: str
    redis_url: str
    name: str = field(default_factory=socket.gethostname)
    tags: dict[str, str] = field(default_factory=dict)
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "slipway" / "provisioner")
    terraform_path: str | None = None


class ProvisionerWorker(SimpleWorker):
    """An RQ worker that runs our job function and nothing else, whatever a queue entry names."""

    def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
        if job.func_name != RUN_JOB_FUNCTION:
            log.error("refused RQ job %s: it names %r, not the provisioner job function", job.id, job.func_name)
            self.handle_job_failure(job, queue, exc_string=f"refused: {job.func_name!r} is not allowed")
            return False
        result: bool = super().perform_job(job, queue, execution)
        return result


def daemon_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slipway")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def run_daemon(config: DaemonConfig, *, burst: bool = False) -> None:
    client = ProvisionerClient(config.url, psk=config.psk)
    connection = redis.Redis.from_url(config.redis_url)
    try:
        registration = client.register(config.name, config.tags, daemon_version())
        config.cache_dir.mkdir(parents=True, exist_ok=True)
        jobs.configure(
            jobs.DaemonContext(client=client, cache_dir=config.cache_dir, terraform_path=config.terraform_path)
        )
        queues = [Queue(name, connection=connection, serializer=JSONSerializer) for name in registration["queues"]]
        log.info("provisioner daemon %s (pid %d) listening on %d queue(s)", config.name, os.getpid(), len(queues))
        worker = ProvisionerWorker(
            queues,
            name=f"{config.name}.{registration['daemon_id'][:8]}.{os.getpid()}",
            connection=connection,
            serializer=JSONSerializer,
        )
        worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
    finally:
        client.close()
        connection.close()
