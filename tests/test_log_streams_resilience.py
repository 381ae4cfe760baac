"""Live logs across replicas and through a Redis restart, with real server processes and a real Redis."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import httpx
import psutil

from app.server.embedded_redis import start_embedded_redis
from app.server.processes import stop
from tests.conftest import PASSWORD
from tests.support.http_daemon import HttpDaemon, api_client, new_version, sign_up_owner
from tests.support.server import ServerProcess
from tests.support.sse import events

PSK = "resilience-psk"


def _reader(url: str, token: str, version_id: str, received: queue.Queue[str]) -> threading.Thread:
    def read() -> None:
        with httpx.Client(timeout=httpx.Timeout(10, read=None)) as client:
            path = f"{url}/api/v2/templateversions/{version_id}/logs?follow=true"
            with client.stream("GET", path, headers={"Authorization": f"Bearer {token}"}) as response:
                for event in events(response):
                    received.put(event.json["output"] if event.event == "log" else f"<{event.event}>")
                    if event.event == "end":
                        return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _expect(received: queue.Queue[str], wanted: list[str], timeout: float) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < len(wanted) and time.monotonic() < deadline:
        try:
            got.append(received.get(timeout=max(deadline - time.monotonic(), 0.01)))
        except queue.Empty:
            break
    return got


def test_a_viewer_on_one_replica_sees_lines_reported_to_another(tmp_path: Path) -> None:
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_SECRET_KEY": "shared-secret"}
    with ServerProcess(tmp_path / "a", "--provisioner-daemons", "0", env=env) as first:
        shared = {
            **env,
            "SLIPWAY_DATABASE_URL": f"sqlite:///{tmp_path / 'a' / 'slipway.db'}",
            "SLIPWAY_REDIS_URL": first.redis_url,
        }
        with ServerProcess(tmp_path / "b", "--provisioner-daemons", "0", env=shared) as second:
            token = sign_up_owner(first.url, PASSWORD)
            with api_client(first.url, token) as api:
                version = new_version(api)
            daemon = HttpDaemon(first.url, PSK)  # the build reports to replica A ...
            daemon.call(f"/jobs/{version['job']['id']}/acquire")
            received: queue.Queue[str] = queue.Queue()
            reader = _reader(second.url, token, version["id"], received)  # ... the viewer watches replica B
            time.sleep(0.5)
            daemon.log(version["job"]["id"], "from A", "to B")
            assert _expect(received, ["from A", "to B"], 10) == ["from A", "to B"]
            daemon.call(f"/jobs/{version['job']['id']}/complete", {"template_import": {}})
            assert _expect(received, ["<end>"], 10) == ["<end>"]
            reader.join(5)
            daemon.close()


def test_streams_back_off_and_catch_up_when_redis_restarts(tmp_path: Path) -> None:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    redis_process = start_embedded_redis(redis_dir)
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_REDIS_URL": f"unix://{redis_dir / 'redis.sock'}"}
    try:
        with ServerProcess(tmp_path / "data", "--provisioner-daemons", "0", env=env) as server:
            token = sign_up_owner(server.url, PASSWORD)
            with api_client(server.url, token) as api:
                version = new_version(api)
            job_id = version["job"]["id"]
            daemon = HttpDaemon(server.url, PSK)
            daemon.call(f"/jobs/{job_id}/acquire")
            received: queue.Queue[str] = queue.Queue()
            reader = _reader(server.url, token, version["id"], received)
            daemon.log(job_id, "before")
            assert _expect(received, ["before"], 10) == ["before"]

            stop([redis_process], grace=5)  # Redis goes away under the open stream
            workers = [
                p
                for p in psutil.Process(server.process.pid).children(recursive=True)
                if "gunicorn" in " ".join(p.cmdline())
            ]  # type: ignore[union-attr]
            cpu_before = sum(sum(p.cpu_times()[:2]) for p in workers)
            daemon.log(job_id, "during")  # stored, but no notice can be published
            time.sleep(3)
            cpu_during = sum(sum(p.cpu_times()[:2]) for p in workers) - cpu_before
            assert cpu_during < 1.5, f"web workers spun while Redis was down ({cpu_during:.2f} CPU-s in 3 s)"

            redis_process = start_embedded_redis(redis_dir)
            daemon.log(job_id, "after")
            assert _expect(received, ["during", "after"], 15) == ["during", "after"]  # the gap filled, in order
            daemon.call(f"/jobs/{job_id}/complete", {"template_import": {}})
            assert _expect(received, ["<end>"], 10) == ["<end>"]
            reader.join(5)
            daemon.close()
            log = server.log()
            assert log.count("lost Redis") <= 2, "one warning per web worker and outage, not one per retry"
    finally:
        stop([redis_process], grace=5)
