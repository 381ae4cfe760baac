"""Log ingestion: how many log lines per second `slipway server` stores, on SQLite and on PostgreSQL.

N producers each hold one running job and post its lines through the daemon API as a daemon does: numbered batches
(``first_seq``), one after another, each waiting for its reply. A line is ~80 bytes like Terraform's, so a job
reaches its 1 MiB cap at ~12,000 lines; each producer sends ``--lines`` per job (below the cap) and the server
stores every one. The figures are lines stored per second over all producers (median of ``--rounds``, each on
fresh jobs), per-batch p50/p99, and a check that the stored count is exactly what was sent.
Run: .venv/bin/python bench/log_ingest.py [--producers 1 4 8] [--batch 100] [--lines 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import Server, median, percentile, postgres_and_redis, sign_up_owner  # noqa: E402

from tests.support.archives import tar_of  # noqa: E402

PSK = "bench-psk"
LINE = "module.workspace.docker_container.main[0]: Still creating... [{n}s elapsed] (line {seq})"


def running_jobs(url: str, api: httpx.Client, count: int) -> tuple[httpx.Client, dict[str, str]]:
    """``count`` template imports (job id: version id), acquired by one registered stand-in daemon (the server runs
    no daemon of its own)."""
    upload = api.post("/files", content=tar_of({"main.tf": ""}))
    upload.raise_for_status()
    jobs = {}
    for _ in range(count):
        version = api.post("/templateversions", json={"file_id": upload.json()["id"]})
        version.raise_for_status()
        jobs[str(version.json()["job"]["id"])] = str(version.json()["id"])
    daemon = httpx.Client(base_url=f"{url}/api/v2/provisionerd", headers={"Slipway-Provisioner-PSK": PSK}, timeout=60)
    registered = daemon.post("/register", json={"name": "bench"})
    registered.raise_for_status()
    daemon.headers["Slipway-Provisioner-Daemon"] = registered.json()["daemon_id"]
    for job_id in jobs:
        daemon.post(f"/jobs/{job_id}/acquire").raise_for_status()
    return daemon, jobs


def produce(daemon: httpx.Client, job_id: str, lines: int, batch: int, latencies: list[float]) -> None:
    for first in range(0, lines, batch):
        logs = [{"stage": "Apply", "output": LINE.format(n=seq // 10, seq=seq)} for seq in range(first, first + batch)]
        began = time.perf_counter()
        reply = daemon.post(f"/jobs/{job_id}/logs", json={"logs": logs, "first_seq": first})
        latencies.append((time.perf_counter() - began) * 1000)
        reply.raise_for_status()


def round_of(url: str, api: httpx.Client, producers: int, lines: int, batch: int) -> tuple[float, list[float], int]:
    """Lines per second stored by ``producers`` jobs at once, the batch latencies, and the lines the logs hold."""
    daemon, jobs = running_jobs(url, api, producers)
    latencies: list[float] = []
    threads = [
        threading.Thread(target=produce, args=(daemon, job_id, lines, batch, latencies), daemon=True) for job_id in jobs
    ]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    held = sum(len(api.get(f"/templateversions/{version}/logs").json()) for version in jobs.values())
    daemon.close()
    return producers * lines / elapsed, latencies, held


def measure(label: str, start: Callable[[], Server], args: argparse.Namespace) -> None:
    server = start()
    try:
        api, _ = sign_up_owner(server.url)
        for producers in args.producers:
            rates, latencies = [], []
            for _ in range(args.rounds):
                rate, batch_ms, held = round_of(server.url, api, producers, args.lines, args.batch)
                expected = producers * args.lines
                if held != expected:
                    raise SystemExit(f"{label}: the logs hold {held} lines, {expected} were sent")
                rates.append(rate)
                latencies += batch_ms
            print(
                f"{label:10} {producers:>2} producer(s): {median(rates):>8,.0f} lines/s (median of {args.rounds}; "
                f"runs {', '.join(f'{rate:,.0f}' for rate in rates)}); batch of {args.batch} p50 "
                f"{percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms; every line stored once"
            )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--producers", type=int, nargs="+", default=[1, 4, 8], help="jobs sending at once")
    parser.add_argument("--batch", type=int, default=100, help="lines per batch (a daemon sends up to 1,000)")
    parser.add_argument("--lines", type=int, default=10_000, help="lines per job (the 1 MiB cap is ~12,000)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK}
    print(f"log_ingest: {args.lines:,} lines per job in batches of {args.batch}; 2 web workers")
    measure("SQLite", lambda: Server(env=env).start(), args)

    with postgres_and_redis("ingest") as (_, external):
        measure("PostgreSQL", lambda: Server(env={**env, **external}).start(), args)
    print("PostgreSQL here runs with fsync=off (the test cluster's settings): a durable disk writes slower.")


if __name__ == "__main__":
    main()
