"""What workers/rq_adapter.py relies on in RQ, checked against the RQ installed: a release that changes either
internal fails here, loudly, instead of leaving daemons that ignore SIGTERM or never stop after a job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker

from workers.rq_adapter import RQ_INTERNALS

QUEUE = "slipway:jobs:rq-adapter-test"


@pytest.fixture
def connection(redis_server: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield client
    client.close()


def test_rq_still_has_both_internals(connection: redis.Redis) -> None:
    worker = SimpleWorker([Queue(QUEUE, connection=connection)], connection=connection)
    for name in RQ_INTERNALS:
        assert hasattr(worker, name), f"RQ no longer has {name}: review workers/rq_adapter.py"


def test_rq_installs_its_signal_handlers_through_the_method_the_adapter_replaces(connection: redis.Redis) -> None:
    installed: list[str] = []

    class Probe(SimpleWorker):
        def _install_signal_handlers(self) -> None:
            installed.append("ours")

    Probe([Queue(QUEUE, connection=connection)], connection=connection).work(burst=True)
    assert installed == ["ours"]


def test_rq_stops_after_the_job_when_the_flag_the_adapter_sets_is_set(connection: redis.Redis) -> None:
    queue = Queue(QUEUE, connection=connection, serializer=JSONSerializer)
    first, second = (queue.enqueue("os.getpid", result_ttl=60) for _ in range(2))

    class Probe(SimpleWorker):
        def perform_job(self, job: Job, queue: Queue, execution: Any) -> bool:
            done: bool = super().perform_job(job, queue, execution)
            self._stop_requested = True  # what the daemon's SIGTERM handler does mid-job
            return done

        def _install_signal_handlers(self) -> None:
            pass

    # Not burst: only the flag can end this loop (a broken flag would block on the empty queue and time out).
    Probe([queue], connection=connection, serializer=JSONSerializer).work(burst=False)
    assert first.get_status(refresh=True) == "finished"
    assert second.get_status(refresh=True) == "queued"
