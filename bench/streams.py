"""One member holding the most live streams they may: /healthz latency against an idle server.

A member asks for ``--attempts`` log streams of one of their builds at once (the finding: ~4,200 used to fill
both web workers); the server keeps ``--max-per-user`` of them (the per-person cap) and refuses the rest with 429.
A stand-in daemon posts a batch of log lines every 250 ms, so every held stream is busy. Meanwhile paced
keep-alive clients ask for /healthz; the same load against the idle server is the baseline.
Run: .venv/bin/python bench/streams.py [--attempts 4200] [--max-per-user 100] [--seconds 10] [--rate 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import LoadResult, Server, percentile, run_load  # noqa: E402

from tests.support.archives import tar_of  # noqa: E402

PSK = "bench-psk"
PASSWORD = "correct-horse-battery"


class StandInDaemon:
    """Just enough of the provisioner protocol to finish an import and feed a build's log."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=f"{url}/api/v2/provisionerd", headers={"Slipway-Provisioner-PSK": PSK})
        reply = self.http.post("/register", json={"name": "bench", "tags": {}})
        reply.raise_for_status()
        self.http.headers["Slipway-Provisioner-Daemon"] = reply.json()["daemon_id"]

    def call(self, path: str, body: dict[str, object] | None = None) -> None:
        self.http.post(path, json=body or {}).raise_for_status()

    def feed(self, job_id: str, stop: threading.Event) -> None:
        while not stop.wait(0.25):
            self.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Planning", "output": "x" * 80}] * 10})


def member_build(server: Server, daemon: StandInDaemon) -> tuple[str, str, str]:
    """A member's token, a build of theirs and its job, running (its log grows), from the owner's template."""
    url = f"{server.url}/api/v2"
    httpx.post(f"{url}/users/first", json={"username": "alice", "email": "a@example.com", "password": PASSWORD})
    owner = httpx.post(f"{url}/users/login", json={"email": "a@example.com", "password": PASSWORD}).json()
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {owner['session_token']}"}, timeout=60)
    upload = admin.post("/files", content=tar_of({"main.tf": ""}), headers={"Content-Type": "application/x-tar"})
    version = admin.post("/templateversions", json={"file_id": upload.json()["id"]}).json()
    daemon.call(f"/jobs/{version['job']['id']}/acquire")
    daemon.call(f"/jobs/{version['job']['id']}/complete", {"template_import": {}})
    template = admin.post("/templates", json={"name": "bench", "version_id": version["id"]}).json()
    member = {"username": "carol", "email": "c@example.com", "password": PASSWORD, "roles": []}
    admin.post("/users", json=member).raise_for_status()
    token = httpx.post(f"{url}/users/login", json={"email": "c@example.com", "password": PASSWORD}).json()
    headers = {"Authorization": f"Bearer {token['session_token']}"}
    workspace = httpx.post(f"{url}/workspaces", json={"template_id": template["id"], "name": "w"}, headers=headers)
    build = workspace.json()["latest_build"]
    daemon.call(f"/jobs/{build['job']['id']}/acquire")
    admin.close()
    return str(token["session_token"]), str(build["id"]), str(build["job"]["id"])


async def hold_streams(
    port: int, path: str, token: str, attempts: int, outcomes: dict[str, int], ready: asyncio.Event
) -> None:
    """``attempts`` connections ask for the stream at once; those the server keeps are read until cancelled.

    ``outcomes`` counts "held" (200), "refused" (429) and "dropped" (closed or reset with no answer: a server
    busy with the burst lets the head wait past its deadline, or closes a connection it already refused)."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode()

    def settle(outcome: str) -> None:
        outcomes[outcome] += 1
        if sum(outcomes.values()) == attempts:
            ready.set()

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        except OSError:
            settle("dropped")
            return
        try:
            writer.write(request)
            try:
                status = (await reader.readline()).split(b" ")[1:2]
            except OSError:
                status = []
            settle({b"200": "held", b"429": "refused"}.get(status[0], "dropped") if status else "dropped")
            while await reader.read(1 << 16):  # a held stream, read as a browser would; a refusal just ends
                pass
        except OSError:
            pass
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(attempts)), return_exceptions=True)


def measure(server: Server, seconds: float, rate: float, clients: int) -> LoadResult:
    run_load(server.port, "/healthz", {}, clients=clients, seconds=1.0, rate=rate)  # warm up every worker
    return run_load(server.port, "/healthz", {}, clients=clients, seconds=seconds, rate=rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=4200, help="streams the member asks for at once")
    parser.add_argument("--max-per-user", type=int, default=100, help="the server's per-person cap")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=100.0, help="/healthz requests/s, paced")
    parser.add_argument("--clients", type=int, default=10, help="keep-alive /healthz clients")
    args = parser.parse_args()

    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(args.max_per_user)}
    server = Server(extra_args=("--provisioner-daemons", "0"), env=env).start()
    stop = threading.Event()
    try:
        daemon = StandInDaemon(server.url)
        token, build_id, job_id = member_build(server, daemon)
        idle = measure(server, args.seconds, args.rate, args.clients)

        outcomes = {"held": 0, "refused": 0, "dropped": 0}
        loop = asyncio.new_event_loop()
        ready = asyncio.Event()
        path = f"/api/v2/workspacebuilds/{build_id}/logs?follow=true"
        streams = loop.create_task(hold_streams(server.port, path, token, args.attempts, outcomes, ready))
        began = time.perf_counter()
        loop.run_until_complete(asyncio.wait_for(ready.wait(), timeout=300))
        answered_in = time.perf_counter() - began
        feeder = threading.Thread(target=daemon.feed, args=(job_id, stop), daemon=True)
        feeder.start()

        def keep_reading() -> None:  # the held streams keep being read while /healthz is measured
            try:
                loop.run_until_complete(streams)
            except asyncio.CancelledError:
                pass
            finally:
                loop.close()

        runner = threading.Thread(target=keep_reading, daemon=True)
        runner.start()
        loaded = measure(server, args.seconds, args.rate, args.clients)
        loop.call_soon_threadsafe(streams.cancel)
        runner.join(30)
    finally:
        stop.set()
        server.stop()

    p50_idle, p99_idle = percentile(idle.latencies_ms, 0.5), percentile(idle.latencies_ms, 0.99)
    p50, p99 = percentile(loaded.latencies_ms, 0.5), percentile(loaded.latencies_ms, 0.99)
    print(f"streams: one member asks for {args.attempts} log streams at once; per-person cap {args.max_per_user}")
    print(
        f"  held {outcomes['held']}, refused with 429 {outcomes['refused']}, dropped unanswered {outcomes['dropped']}"
        f" (the burst settled in {answered_in:.1f} s)"
    )
    print(f"  /healthz at {args.rate:.0f}/s over {args.clients} keep-alive clients, {args.seconds:.0f} s each:")
    print(idle.line("    idle server"))
    print(loaded.line(f"    member holding {outcomes['held']} busy streams"))
    print(f"  ratio held/idle: p50 {p50 / p50_idle:.2f}x   p99 {p99 / p99_idle:.2f}x")


if __name__ == "__main__":
    main()
