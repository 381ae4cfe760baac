"""Shared pieces of the benchmarks: a real `slipway server`, a lean keep-alive HTTP load generator, figures."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psutil

if TYPE_CHECKING:
    from tests.support.postgres import PostgresCluster
    from workers.terraform import TerraformBinary

SLIPWAY = str(Path(sys.executable).with_name("slipway"))
OWNER_PASSWORD = "correct-horse-battery"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """`slipway server` on a free port with a throwaway data dir."""

    extra_args: tuple[str, ...] = ("--provisioner-daemons", "0")
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    data_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="slipway-bench-")))
    process: subprocess.Popen[bytes] | None = None
    cold_start_seconds: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        env.update(self.env)
        args = [SLIPWAY, "server", "--address", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir)]
        began = time.perf_counter()
        self.process = subprocess.Popen(
            [*args, *self.extra_args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"server exited: {self.process.stderr.read().decode() if self.process.stderr else ''}"
                )
            time.sleep(0.01)
        self.cold_start_seconds = time.perf_counter() - began
        return self

    def rss_mb(self) -> float:
        """Resident memory of the server and everything it started, in MB."""
        assert self.process is not None
        root = psutil.Process(self.process.pid)
        return sum(proc.memory_info().rss for proc in [root, *root.children(recursive=True)]) / 1e6

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(2)
            self.process.wait(timeout=30)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


@dataclass
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    def line(self, label: str) -> str:
        lat = self.latencies_ms
        return (
            f"{label:<40} {self.requests / self.seconds:8.0f} req/s   p50 {percentile(lat, 0.50):6.1f} ms"
            f"   p95 {percentile(lat, 0.95):6.1f} ms   p99 {percentile(lat, 0.99):6.1f} ms   errors {self.errors}"
        )


async def _client(
    port: int, request: bytes, deadline: float, latencies: list[float], errors: list[int], interval: float, phase: float
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # Spread paced clients over the interval: twenty clients firing in the same millisecond measure a burst.
    next_send = time.perf_counter() + phase
    try:
        while time.perf_counter() < deadline:
            if interval:
                # Paced: latency is measured from when the request was due, so a slow server cannot hide its
                # queueing by delaying the next send (no coordinated omission).
                next_send += interval
                await asyncio.sleep(max(next_send - interval - time.perf_counter(), 0))
                began = next_send - interval
            else:
                began = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            latencies.append((time.perf_counter() - began) * 1000)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


def run_load(
    port: int, path: str, headers: dict[str, str], *, clients: int, seconds: float, rate: float = 0.0
) -> LoadResult:
    """`clients` keep-alive connections. With ``rate`` 0 each sends its next request as soon as the last answer
    arrived (saturation); otherwise they share ``rate`` requests/s between them at a steady pace."""
    interval = clients / rate if rate else 0.0
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    latencies: list[float] = []
    errors: list[int] = []

    async def main() -> float:
        began = time.perf_counter()
        deadline = began + seconds
        await asyncio.gather(
            *(
                _client(port, request, deadline, latencies, errors, interval, i * interval / clients)
                for i in range(clients)
            )
        )
        return time.perf_counter() - began

    elapsed = asyncio.run(main())
    return LoadResult(len(latencies), len(errors), elapsed, latencies)


def median(values: list[float]) -> float:
    return statistics.median(values)


def sign_up_owner(url: str) -> tuple[httpx.Client, str]:
    """The first user of a fresh server: an API client signed in as them, and their session token."""
    account = {"username": "alice", "email": "a@example.com", "password": OWNER_PASSWORD}
    httpx.post(f"{url}/api/v2/users/first", json=account)
    login = httpx.post(f"{url}/api/v2/users/login", json={"email": account["email"], "password": OWNER_PASSWORD})
    token = str(login.json()["session_token"])
    api = httpx.Client(base_url=f"{url}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return api, token


@contextmanager
def postgres_and_redis(database: str) -> Iterator[tuple[PostgresCluster, dict[str, str]]]:
    """A throwaway PostgreSQL cluster holding ``database``, and a Redis: the cluster, and the environment a server
    (or an app) reaches both with."""
    # Here rather than at the top: the benchmarks that only start a server do not put the repository on sys.path.
    from app.server.embedded_redis import start_embedded_redis
    from app.server.processes import stop
    from tests.support.postgres import PostgresCluster

    cluster = PostgresCluster()
    cluster.start()
    redis_dir = Path(tempfile.mkdtemp(prefix="slipway-bench-redis-"))
    redis_process = start_embedded_redis(redis_dir)
    try:
        cluster.execute(f"CREATE DATABASE {database}")
        yield (
            cluster,
            {
                "SLIPWAY_DATABASE_URL": cluster.url(database),
                "SLIPWAY_REDIS_URL": f"unix://{redis_dir / 'redis.sock'}",
            },
        )
    finally:
        stop([redis_process], grace=5)
        cluster.stop()


def offline_terraform_env(cli_config: Path) -> dict[str, str]:
    """This process's environment for Terraform as the tests run it: no CODER_*, SLIPWAY_* or TF_* of the caller's,
    providers from ``cli_config`` (our provider's filesystem mirror), no call home."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CODER_", "SLIPWAY_", "TF_"))}
    env.update(TF_CLI_CONFIG_FILE=str(cli_config), CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1")
    return env


def run_terraform(
    terraform: TerraformBinary, directory: Path, env: dict[str, str], *arguments: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """One Terraform command in ``directory``, without colour, its output kept; a failure is the caller's to read."""
    return subprocess.run(
        terraform.argv(*arguments, "-no-color"),
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
