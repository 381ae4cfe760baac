"""The daemon process: it keeps the one rule, and its RQ worker runs our job function and nothing else."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from tests.support.server import ServerProcess
from workers.client import psk_credential
from workers.daemon import DaemonConfig, run_daemon

WORKERS = Path(__file__).resolve().parent.parent.parent / "workers"
PSK = "daemon-test-psk"
UNTAGGED_QUEUE = "slipway:jobs:owner=&scope=organization"


def test_nothing_under_workers_imports_app() -> None:
    offenders = []
    for path in WORKERS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {name}" for name in names if name == "app" or name.startswith("app.")]
    assert offenders == []


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # The PSK's daemons get Redis here, so the RQ worker is the one tested.
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_PROVISIONER_TRUST_REDIS": "psk"}
    with ServerProcess(tmp_path_factory.mktemp("daemon") / "data", "--provisioner-daemons", "0", env=env) as running:
        yield running


def test_worker_refuses_jobs_naming_other_callables(server: ServerProcess, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("still here")
    redis_url = server.redis_url
    connection = redis.Redis.from_url(redis_url)
    try:
        queue = Queue(UNTAGGED_QUEUE, connection=connection, serializer=JSONSerializer)
        evil = queue.enqueue("os.remove", str(canary))
        config = DaemonConfig(
            url=server.url,
            credential=psk_credential(PSK),
            redis_url=redis_url,
            name="refuser",
            cache_dir=tmp_path / "cache",
        )
        run_daemon(config, burst=True)
        assert canary.read_text() == "still here"
        refused = Job.fetch(evil.id, connection=connection, serializer=JSONSerializer)
        assert refused.get_status() == JobStatus.FAILED
        assert "not allowed" in (refused.latest_result().exc_string or "")  # type: ignore[union-attr]
    finally:
        connection.close()


def test_daemon_with_a_wrong_key_stops_with_a_clear_error(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = DaemonConfig(url=server.url, credential=psk_credential("wrong"), cache_dir=tmp_path / "c")
    assert run_daemon(config, burst=True) == 1
    assert "PSK is wrong" in caplog.text
    assert os.environ.get("SLIPWAY_PROVISIONER_DAEMON_PSK") is None  # the test did not leak its key
