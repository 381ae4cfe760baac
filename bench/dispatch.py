"""Dispatch: how fast provisioner jobs reach daemons.

`pickup` (issue 14): one external daemon on a real server, waiting for jobs over HTTP (long-poll, the default for
daemons the server does not trust with Redis) or on Redis (RQ, `--provisioner-trust-redis psk`). N template
imports one after another, then rounds of K submitted at once. A job's pickup is the time from its creation (the
POST that creates the template version) until the daemon acquired it, or, for a job queued behind another, from
when the daemon finished that one: what the daemon's own round trip costs. Times come from the server's job
timestamps (created_at, started_at, completed_at). Prints p50/p95/max for both ways and their ratio (target: p95
<= 100 ms for both).

`burst` ("30 provisioners let 30 users start workspaces at the same time"): a template whose apply sleeps 3 s, N
`slipway provisionerd start` processes, N workspaces created together. Prints the time from the first submission
until every build is running (target <= 2 s), the total wall time, and the same builds on one daemon.
Daemons wait over HTTP (the default for daemons the server does not trust with Redis) unless `--redis`.

    .venv/bin/python bench/dispatch.py pickup [--jobs 50] [--concurrent 5] [--rounds 4]
    .venv/bin/python bench/dispatch.py burst [--daemons 30] [--rounds 3] [--skip-single] [--postgres] [--redis]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import SLIPWAY, Server, percentile, sign_up_owner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.archives import tar_of

PSK = "bench-dispatch-psk"
SLEEPY = {
    "main.tf": 'resource "terraform_data" "work" {\n  provisioner "local-exec" {\n    command = "sleep 3"\n  }\n}\n'
}
TERMINAL = ("succeeded", "failed", "canceled")
# Nothing to build: a job that measures the queue, not Terraform.
NOTHING = {"main.tf": "# no resources\n"}
PICKUP_WAYS = {"HTTP long-poll": {}, "Redis (RQ)": {"SLIPWAY_PROVISIONER_TRUST_REDIS": "psk"}}
# What each daemon logs once it knows where its jobs come from.
PICKUP_LOG_LINE = {"HTTP long-poll": "waiting for jobs over HTTP", "Redis (RQ)": "listening on"}


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def start_daemons(url: str, count: int, scratch: Path) -> list[subprocess.Popen[bytes]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
    env.update(SLIPWAY_PROVISIONER_DAEMON_PSK=PSK, SLIPWAY_PROVISIONER_CACHE_DIR=str(scratch / "cache"))
    return [
        subprocess.Popen(
            [SLIPWAY, "provisionerd", "start", "--url", url, "--name", f"bench-{index}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(scratch / f"daemon-{index}.log").open("wb"),
        )
        for index in range(count)
    ]


def wait_idle(api: httpx.Client, count: int) -> None:
    deadline = time.monotonic() + 120
    while sum(daemon["status"] == "idle" for daemon in api.get("/provisionerdaemons").json()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("daemons did not come up")
        time.sleep(0.2)
    time.sleep(0.5)  # registered, then listening on their queues


def create_template(api: httpx.Client) -> str:
    upload = api.post("/files", content=tar_of(SLEEPY), headers={"Content-Type": "application/x-tar"}).json()
    version = api.post("/templateversions", json={"file_id": upload["id"]}).json()
    while (job := api.get(f"/templateversions/{version['id']}").json()["job"])["status"] not in TERMINAL:
        time.sleep(0.1)
    if job["status"] != "succeeded":
        raise RuntimeError(f"import failed: {job['error']}")
    return str(api.post("/templates", json={"name": "sleepy", "version_id": version["id"]}).json()["id"])


def burst(api: httpx.Client, template_id: str, count: int, label: str) -> tuple[float, float, float]:
    """Create ``count`` workspaces at once; seconds from the first submission until all are running and until
    all have finished, and the longest a single job waited between its creation and a daemon taking it."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        workspaces = list(
            pool.map(
                lambda index: api.post("/workspaces", json={"template_id": template_id, "name": f"{label}-{index}"}),
                range(count),
            )
        )
    job_ids = [reply.json()["latest_build"]["job"]["id"] for reply in workspaces]
    while True:
        jobs = [api.get(f"/provisionerjobs/{job_id}").json() for job_id in job_ids]
        if all(job["status"] in TERMINAL for job in jobs):
            break
        time.sleep(0.5)
    failed = [job for job in jobs if job["status"] != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} build(s) failed, e.g. {failed[0]['error']}")
    first = min(parse_time(job["created_at"]) for job in jobs)
    all_running = max(parse_time(job["started_at"]) for job in jobs) - first
    all_done = max(parse_time(job["completed_at"]) for job in jobs) - first
    longest_wait = max(parse_time(job["started_at"]) - parse_time(job["created_at"]) for job in jobs)
    spread = max(parse_time(job["created_at"]) for job in jobs) - first
    print(f"    (the {count} creations themselves spread over {spread.total_seconds():.2f} s)", flush=True)
    return all_running.total_seconds(), all_done.total_seconds(), longest_wait.total_seconds()


def scenario(
    daemons: int, builds: int, rounds: int, database_url: str = "", redis: bool = False
) -> list[tuple[float, float, float]]:
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-dispatch-"))
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, **PICKUP_WAYS["Redis (RQ)" if redis else "HTTP long-poll"]}
    if database_url:
        env["SLIPWAY_DATABASE_URL"] = database_url
    server = Server(env=env).start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        api, _ = sign_up_owner(server.url)
        processes = start_daemons(server.url, daemons, scratch)
        wait_idle(api, daemons)
        template_id = create_template(api)
        results = []
        for round_number in range(rounds):
            results.append(burst(api, template_id, builds, f"r{round_number}"))
            print(
                f"  {daemons:>2} daemon(s), round {round_number + 1}: all {builds} running after "
                f"{results[-1][0]:.2f} s, all finished after {results[-1][1]:.1f} s "
                f"(longest wait of one job for a daemon: {results[-1][2]:.2f} s)",
                flush=True,
            )
        return results
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    scenarios = parser.add_subparsers(dest="scenario", required=True)
    pickup = scenarios.add_parser("pickup", help="One daemon: job pickup over HTTP long-poll and over Redis.")
    pickup.add_argument("--jobs", type=int, default=50, help="Jobs submitted one after another.")
    pickup.add_argument("--concurrent", type=int, default=5, help="Jobs submitted at once, in each round.")
    pickup.add_argument("--rounds", type=int, default=4, help="Rounds of concurrent jobs.")
    burst = scenarios.add_parser("burst", help="N daemons, N builds at once: time until all run, speed-up.")
    burst.add_argument("--daemons", type=int, default=30)
    burst.add_argument("--rounds", type=int, default=3)
    burst.add_argument("--skip-single", action="store_true", help="Skip the one-daemon comparison.")
    burst.add_argument("--postgres", action="store_true", help="A throwaway PostgreSQL instead of SQLite.")
    burst.add_argument("--redis", action="store_true", help="Daemons on Redis (RQ) instead of HTTP long-poll.")
    args = parser.parse_args()
    if args.scenario == "pickup":
        report_pickup(args.jobs, args.concurrent, args.rounds)
        return
    database_url, cluster = "", None
    if args.postgres:
        from tests.support.postgres import PostgresCluster

        cluster = PostgresCluster()
        cluster.start()
        cluster.execute("CREATE DATABASE dispatch")
        database_url = cluster.url("dispatch")
    store = "PostgreSQL" if args.postgres else "SQLite"
    print(f"{args.daemons} builds of a template whose apply sleeps 3 s ({store}, embedded Redis)")
    try:
        report(args.daemons, args.rounds, args.skip_single, database_url, args.redis)
    finally:
        if cluster is not None:
            cluster.stop()


def report_pickup(jobs: int, concurrent: int, rounds: int) -> None:
    print(f"pickup: one external daemon; {jobs} imports one after another, {rounds} rounds of {concurrent} at once")
    results = {way: pickup_scenario(way, jobs, concurrent, rounds) for way in PICKUP_WAYS}
    for way, (alone, queued) in results.items():
        for label, values in (("submitted alone", alone), ("queued behind another", queued)):
            print(
                f"  {way:<15} {label:<22} p50 {percentile(values, 0.5):6.1f} ms   p95 {percentile(values, 0.95):6.1f}"
                f" ms   max {max(values):6.1f} ms   ({len(values)} jobs)"
            )
    http, rq = (sorted(alone + queued) for alone, queued in results.values())
    for way, values in zip(results, (http, rq), strict=True):
        print(
            f"  {way:<15} {'all jobs':<22} p50 {percentile(values, 0.5):6.1f} ms   p95 {percentile(values, 0.95):6.1f}"
            f" ms   max {max(values):6.1f} ms   ({len(values)} jobs)"
        )
    print(
        f"  all jobs: HTTP p95 {percentile(http, 0.95):.1f} ms, Redis p95 {percentile(rq, 0.95):.1f} ms, "
        f"ratio HTTP/Redis {percentile(http, 0.95) / percentile(rq, 0.95):.2f} (p50 ratio "
        f"{percentile(http, 0.5) / percentile(rq, 0.5):.2f}); target p95 <= 100 ms for both"
    )


def pickup_scenario(way: str, jobs: int, concurrent: int, rounds: int) -> tuple[list[float], list[float]]:
    """Pickup times in ms of jobs submitted while the daemon was idle, and of jobs that waited for it."""
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-pickup-"))
    server = Server(env={"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, **PICKUP_WAYS[way]}).start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        api, _ = sign_up_owner(server.url)
        processes = start_daemons(server.url, 1, scratch)
        wait_idle(api, 1)
        log = (scratch / "daemon-0.log").read_text()
        if PICKUP_LOG_LINE[way] not in log:
            raise RuntimeError(f"the daemon does not take jobs by {way}:\n{log}")
        file_id = api.post("/files", content=tar_of(NOTHING), headers={"Content-Type": "application/x-tar"}).json()[
            "id"
        ]
        for _ in range(2):  # warm-up: Terraform's first init in a fresh cache, the server's first queries
            finished_jobs(api, [submit(api, file_id)])
        timings = [finished_jobs(api, [submit(api, file_id)])[0] for _ in range(jobs)]
        for _ in range(rounds):
            with ThreadPoolExecutor(max_workers=concurrent) as pool:
                versions = list(pool.map(lambda _: submit(api, file_id), range(concurrent)))
            timings += finished_jobs(api, versions)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        server.stop()
    return pickups(timings)


def submit(api: httpx.Client, file_id: str) -> str:
    reply = api.post("/templateversions", json={"file_id": file_id})
    if reply.status_code != 201:
        raise RuntimeError(f"creating a version failed: {reply.text}")
    return str(reply.json()["id"])


def finished_jobs(api: httpx.Client, version_ids: list[str]) -> list[tuple[datetime, datetime, datetime]]:
    """(created, started, completed) of each version's import, once all have succeeded."""
    done: dict[str, dict[str, str]] = {}
    while len(done) < len(version_ids):
        time.sleep(0.05)
        for version_id in version_ids:
            if version_id not in done:
                job = api.get(f"/templateversions/{version_id}").json()["job"]
                if job["status"] in TERMINAL:
                    if job["status"] != "succeeded":
                        raise RuntimeError(f"import {job['id']} {job['status']}: {job['error']}")
                    done[version_id] = job
    return [
        (parse_time(job["created_at"]), parse_time(job["started_at"]), parse_time(job["completed_at"]))
        for job in (done[version_id] for version_id in version_ids)
    ]


def pickups(timings: list[tuple[datetime, datetime, datetime]]) -> tuple[list[float], list[float]]:
    """In the order the one daemon ran them, each job waited for it from max(its creation, the previous job's
    end) until its start."""
    alone, queued = [], []
    previous_end: datetime | None = None
    for created, started, completed in sorted(timings, key=lambda timing: timing[1]):
        if previous_end is not None and previous_end > created:
            queued.append((started - previous_end).total_seconds() * 1000)
        else:
            alone.append((started - created).total_seconds() * 1000)
        previous_end = completed
    return alone, queued


def report(daemons: int, rounds: int, skip_single: bool, database_url: str, redis: bool = False) -> None:
    many = scenario(daemons, daemons, rounds, database_url, redis)
    running = statistics.median(result[0] for result in many)
    wall = statistics.median(result[1] for result in many)
    print(f"{daemons} daemons: all running after {running:.2f} s (median of {len(many)}; target <= 2 s)")
    print(f"{daemons} daemons: total wall {wall:.1f} s (median)")
    if not skip_single:
        one = scenario(1, daemons, 1, database_url, redis)
        print(f"1 daemon:   total wall {one[0][1]:.1f} s -> speed-up {one[0][1] / wall:.1f}x")


if __name__ == "__main__":
    main()
