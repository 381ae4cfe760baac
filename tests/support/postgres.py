"""A throwaway PostgreSQL cluster for the test session: initdb in a temp dir, a free port, removed at the end."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.support.net import free_port


def _pg_bin(name: str) -> str:
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    path = candidates[-1]
    if not path or not os.path.exists(path):
        raise RuntimeError(f"PostgreSQL's {name} was not found: run `make test`, which installs postgresql")
    return path


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb refuses to run as root; as another user it runs as that user directly.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class PostgresCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="slipway-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = "slipway"

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        initdb = [_pg_bin("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8"]
        subprocess.run(_as_postgres([*initdb, "--locale=C.UTF-8", "--no-sync"]), check=True, capture_output=True)
        self.resume()

    def resume(self) -> None:
        """Start the cluster's server (again, after :meth:`halt`), on the same port and data."""
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} -c fsync=off"
        options += " -c full_page_writes=off -c synchronous_commit=off -c max_connections=300"
        log = str(self.root / "server.log")
        subprocess.run(
            _as_postgres([_pg_bin("pg_ctl"), "-D", str(self.data), "-l", log, "-w", "-o", options, "start"]),
            check=True,
            capture_output=True,
        )

    def halt(self) -> None:
        """Stop the server as a restart does (fast: sessions are ended, committed data is kept), keeping the data."""
        subprocess.run(
            _as_postgres([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
            check=True,
            capture_output=True,
        )

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def execute(self, statement: str) -> None:
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(statement)  # type: ignore[arg-type]

    def stop(self) -> None:
        subprocess.run(
            _as_postgres([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                shutil.rmtree(self.root)
                return
            except OSError:
                time.sleep(0.2)
