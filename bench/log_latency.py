"""Issue 4 benchmark: how fast a log line reaches N live viewers.

A producer posts log batches through the daemon API at 50 lines/s (every 250 ms, as a daemon does) while N SSE
clients follow the job. Each line carries its send time; the figures are receive time minus send time over all
(line, client) pairs, the share of pairs delivered, and the web processes' RSS.
Targets on 2 cores: N=100 p99 <= 100 ms; N=1,000 p99 <= 500 ms with 100 % delivered and RSS <= 400 MB.
Run: .venv/bin/python bench/log_latency.py [--clients 100 1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import Server, percentile  # noqa: E402

from tests.support.archives import tar_of  # noqa: E402

PSK = "bench-psk"
PASSWORD = "correct-horse-battery"
SENT = re.compile(rb'"output": "t=([0-9.]+)')


async def sse_client(
    port: int, path: str, token: str, latencies: list[float], ready: asyncio.Event, count: list[int]
) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    await reader.readuntil(b"\r\n\r\n")
    received, buffer = 0, b""
    count[0] += 1
    if count[0] == count[1]:
        ready.set()
    try:
        while True:  # chunked transfer encoding: size line, data, CRLF
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                break
            buffer += await reader.readexactly(size + 2)
            now = time.time()
            *complete, buffer = buffer.split(b"\n\n")
            for event in complete:
                if b"event: end" in event:
                    return received
                match = SENT.search(event)
                if match:
                    latencies.append((now - float(match[1])) * 1000)
                    received += 1
    finally:
        writer.close()
    return received


def produce(url: str, job_id: str, seconds: float, sent: list[int], started: threading.Event) -> None:
    started.wait()
    with httpx.Client(base_url=f"{url}/api/v2/provisionerd", headers={"Slipway-Provisioner-PSK": PSK}) as daemon:
        daemon.headers["Slipway-Provisioner-Daemon"] = daemon.post("/register", json={"name": "bench"}).json()[
            "daemon_id"
        ]
        daemon.post(f"/jobs/{job_id}/acquire").raise_for_status()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            batch = [{"stage": "Bench", "output": f"t={time.time():.6f}"} for _ in range(12)]  # 12 per 250 ms ~ 50/s
            for line in batch:
                line["output"] = f"t={time.time():.6f}"
            daemon.post(f"/jobs/{job_id}/logs", json={"logs": batch}).raise_for_status()
            sent[0] += len(batch)
            time.sleep(0.25)
        daemon.post(f"/jobs/{job_id}/complete", json={"template_import": {}}).raise_for_status()


def run(clients: int, seconds: float) -> None:
    # All N viewers are one person here: lift the per-person cap on live streams (100 by default) above N.
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(clients + 10)}
    server = Server(extra_args=("--provisioner-daemons", "0"), env=env)
    server.start()
    try:
        base = server.url
        httpx.post(
            f"{base}/api/v2/users/first", json={"username": "alice", "email": "a@example.com", "password": PASSWORD}
        )
        token = httpx.post(f"{base}/api/v2/users/login", json={"email": "a@example.com", "password": PASSWORD}).json()[
            "session_token"
        ]
        api = httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token}"})
        upload = api.post("/files", content=tar_of({"main.tf": ""})).json()
        version = api.post("/templateversions", json={"file_id": upload["id"]}).json()
        path = f"/api/v2/templateversions/{version['id']}/logs?follow=true"
        latencies: list[float] = []
        sent = [0]
        started = threading.Event()
        producer = threading.Thread(target=produce, args=(base, version["job"]["id"], seconds, sent, started))
        producer.start()
        rss = [0.0]

        async def main() -> list[int]:
            ready, count = asyncio.Event(), [0, clients]
            tasks = [
                asyncio.create_task(sse_client(server.port, path, token, latencies, ready, count))
                for _ in range(clients)
            ]
            await asyncio.wait_for(ready.wait(), 60)
            await asyncio.sleep(0.5)
            started.set()
            await asyncio.sleep(seconds / 2)
            root = psutil.Process(server.process.pid)  # type: ignore[union-attr]
            rss[0] = (
                sum(p.memory_info().rss for p in root.children(recursive=True) if "gunicorn" in " ".join(p.cmdline()))
                / 1e6
            )
            return list(await asyncio.gather(*tasks))

        received = asyncio.run(main())
        producer.join()
    finally:
        server.stop()
    expected = sent[0] * clients
    print(
        f"N={clients:>5}: {sent[0]} lines x {clients} clients; delivered {sum(received) / expected:.1%}; latency "
        f"p50 {percentile(latencies, 0.5):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms, "
        f"p99 {percentile(latencies, 0.99):.0f} ms; web RSS {rss[0]:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print("log_latency: producer at 50 lines/s in 250 ms batches; 2 gevent web workers; SQLite")
    for clients in args.clients:
        run(clients, args.seconds)
    print("targets: N=100 p99 <= 100 ms; N=1000 p99 <= 500 ms, 100 % delivered, RSS <= 400 MB")


if __name__ == "__main__":
    main()
