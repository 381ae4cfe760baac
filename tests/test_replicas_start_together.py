"""Replicas of one deployment started at the same moment (a Kubernetes Deployment's pods) on a fresh PostgreSQL
database: each runs the migrations before it serves, one at a time, and all serve. (Without the lock, replicas
creating the same tables at once exit on a duplicate key: the race shows about one run in three with two replicas,
so four start here.)"""

from __future__ import annotations

import threading
from pathlib import Path

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.support.postgres import PostgresCluster
from tests.support.server import ServerProcess


def test_replicas_started_together_on_a_fresh_database_all_serve(tmp_path: Path, postgres: PostgresCluster) -> None:
    postgres.execute("CREATE DATABASE started_together")
    (tmp_path / "redis").mkdir()
    redis_process = start_embedded_redis(tmp_path / "redis")
    env = {
        "SLIPWAY_DATABASE_URL": postgres.url("started_together"),
        "SLIPWAY_REDIS_URL": f"unix://{tmp_path / 'redis' / 'redis.sock'}",
        "SLIPWAY_SECRET_KEY": "shared-secret",
    }
    replicas = [ServerProcess(tmp_path / f"replica-{n}", "--provisioner-daemons", "0", env=env) for n in range(4)]
    failures: list[str] = []

    def start(replica: ServerProcess) -> None:
        try:
            replica.start(timeout=180)
        except AssertionError as exc:  # it says why, with the server's log
            failures.append(str(exc))

    starters = [threading.Thread(target=start, args=(replica,)) for replica in replicas]
    try:
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(timeout=240)
        assert failures == []
    finally:
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.stop()
        stop([redis_process], grace=5)
