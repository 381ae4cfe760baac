"""Replicas of one deployment started at the same moment (a Kubernetes Deployment's pods) on a fresh PostgreSQL
database: each runs the migrations before it serves, one at a time, and all serve. (Without the lock, replicas
creating the same tables at once exit on a duplicate key: the race shows about one run in three with two replicas,
so four start here.) And a replica that waits for another's migrations refuses connections until it may serve."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from app.server.supervisor import MIGRATION_LOCK_KEY
from tests.support.postgres import PostgresCluster
from tests.support.server import ServerProcess
from tests.support.waiting import wait_until


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


def _web_master_at_its_gate(server: ServerProcess) -> bool:
    """gunicorn's master has loaded the application and blocks reading its start gate (app/server/web.py)."""
    for process in server.tree():
        try:
            is_master = "gunicorn" in " ".join(process.cmdline()) and process.ppid() == server.process.pid  # type: ignore[union-attr]
            # The kernel function it sleeps in: pipe_read, or anon_pipe_read on newer kernels.
            if is_master and Path(f"/proc/{process.pid}/wchan").read_text().endswith("pipe_read"):
                return True
        except (psutil.Error, OSError):
            continue
    return False


def test_a_replica_waiting_for_the_migrations_refuses_connections_then_serves(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    """The web server loads the application while the database is migrated (here: held by another replica's
    migration lock), but listens only once the migrations are done: until then a connection is refused, so a load
    balancer sends it elsewhere at once."""
    postgres.execute("CREATE DATABASE held_migrations")
    server = ServerProcess(
        tmp_path / "data", "--provisioner-daemons", "0", "--drain-period", "3",
        env={"SLIPWAY_DATABASE_URL": postgres.url("held_migrations")},
    )  # fmt: skip
    started: list[ServerProcess] = []
    with psycopg.connect(
        f"host=127.0.0.1 port={postgres.port} user={postgres.user} dbname=held_migrations", autocommit=True
    ) as other_replica:
        other_replica.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        starter = threading.Thread(target=lambda: started.append(server.start(timeout=120)))
        starter.start()
        try:
            wait_until(lambda: _web_master_at_its_gate(server), timeout=90, what="the web server to wait at its gate")
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", server.port), timeout=10)
        finally:
            other_replica.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    starter.join(timeout=150)
    try:
        assert started, server.log()
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        # Stopped as Kubernetes stops a pod: readiness fails first, while requests are still served, then it stops.
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        wait_until(lambda: httpx.get(f"{server.url}/healthz", timeout=10).status_code == 503, what="readiness to fail")
        draining = httpx.get(f"{server.url}/healthz", timeout=10)
        assert draining.text == "unhealthy: draining (this replica is stopping)\n"
        assert httpx.get(f"{server.url}/login", timeout=10, follow_redirects=True).status_code == 200
        assert server.stop(signum=signal.SIGTERM) == 0, server.log()
        assert "Draining for 3 s" in server.log()
        assert not (tmp_path / "data" / "draining").exists()
    finally:
        server.stop()
