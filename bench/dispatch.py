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

`priority` (issue 18): 3 daemons, a template whose start sleeps 2 s, N + 1 stopped workspaces. The lifecycle
executor (ticking every second) autostarts N of them in the same minute; once all N automatic builds are queued a
person starts the last one. Prints how long the person's build waited for a daemon against the median duration of
one build (target: the wait <= one build), and how long it would have waited at the back of the flood.

    .venv/bin/python bench/dispatch.py pickup [--jobs 50] [--concurrent 5] [--rounds 4]
    .venv/bin/python bench/dispatch.py burst [--daemons 30] [--rounds 3] [--skip-single] [--postgres] [--redis]
    .venv/bin/python bench/dispatch.py priority [--flood 50] [--daemons 3] [--redis]
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
from datetime import UTC, datetime, timedelta
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
# A start takes about 2 s of apply, a stop next to nothing.
STARTS_SLOWLY = {
    "main.tf": """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "work" {
  count = data.coder_workspace.me.start_count
  provisioner "local-exec" {
    command = "sleep 2"
  }
}
"""
}
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


def stop_daemons(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_idle(api: httpx.Client, count: int) -> None:
    deadline = time.monotonic() + 120
    while sum(daemon["status"] == "idle" for daemon in api.get("/provisionerdaemons").json()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("daemons did not come up")
        time.sleep(0.2)
    time.sleep(0.5)  # registered, then listening on their queues


def create_template(api: httpx.Client, files: dict[str, str] = SLEEPY) -> str:
    upload = api.post("/files", content=tar_of(files), headers={"Content-Type": "application/x-tar"}).json()
    version = api.post("/templateversions", json={"file_id": upload["id"]}).json()
    while (job := api.get(f"/templateversions/{version['id']}").json()["job"])["status"] not in TERMINAL:
        time.sleep(0.1)
    if job["status"] != "succeeded":
        raise RuntimeError(f"import failed: {job['error']}")
    reply = api.post("/templates", json={"name": "sleepy", "version_id": version["id"]})
    if reply.status_code != 201:
        raise RuntimeError(f"creating the template failed: {reply.text}")
    return str(reply.json()["id"])


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
    jobs = wait_for_builds(api, [reply.json()["latest_build"]["job"]["id"] for reply in workspaces])
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
        stop_daemons(processes)
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
    priority = scenarios.add_parser("priority", help="A person's build behind a flood of automatic ones.")
    priority.add_argument("--flood", type=int, default=50, help="Automatic builds queued in the same minute.")
    priority.add_argument("--daemons", type=int, default=3)
    priority.add_argument("--redis", action="store_true", help="Daemons on Redis (RQ) instead of HTTP long-poll.")
    args = parser.parse_args()
    if args.scenario == "pickup":
        report_pickup(args.jobs, args.concurrent, args.rounds)
        return
    if args.scenario == "priority":
        report_priority(args.flood, args.daemons, args.redis)
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


def wait_for_builds(api: httpx.Client, job_ids: list[str]) -> list[dict[str, str]]:
    """The jobs, once all have ended; RuntimeError when one did not succeed."""
    while True:
        jobs = [api.get(f"/provisionerjobs/{job_id}").json() for job_id in job_ids]
        if all(job["status"] in TERMINAL for job in jobs):
            failed = [job for job in jobs if job["status"] != "succeeded"]
            if failed:
                raise RuntimeError(f"{len(failed)} build(s) failed, e.g. {failed[0]['error']}")
            return jobs
        time.sleep(0.5)


def build_of(api: httpx.Client, workspace_id: str, transition: str) -> str:
    reply = api.post(f"/workspaces/{workspace_id}/builds", json={"transition": transition})
    if reply.status_code != 201:
        raise RuntimeError(f"{transition} failed: {reply.text}")
    return str(reply.json()["job"]["id"])


def report_priority(flood: int, daemons: int, redis: bool) -> None:
    way = "Redis (RQ)" if redis else "HTTP long-poll"
    print(f"priority: {daemons} daemons ({way}), {flood} autostarts queued in the same minute, then a person's start")
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-priority-"))
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": PSK, "SLIPWAY_LIFECYCLE_INTERVAL": "1", **PICKUP_WAYS[way]}
    server = Server(env=env).start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        api, _ = sign_up_owner(server.url)
        processes = start_daemons(server.url, daemons, scratch)
        wait_idle(api, daemons)
        template_id = create_template(api, STARTS_SLOWLY)
        print(f"  creating and stopping {flood + 1} workspaces …", flush=True)
        with ThreadPoolExecutor(max_workers=8) as pool:
            created = list(
                pool.map(lambda i: api.post("/workspaces", json={"template_id": template_id, "name": f"w{i}"}),
                         range(flood + 1))
            )  # fmt: skip
        workspace_ids = [reply.json()["id"] for reply in created]
        wait_for_builds(api, [reply.json()["latest_build"]["job"]["id"] for reply in created])
        wait_for_builds(api, [build_of(api, workspace_id, "stop") for workspace_id in workspace_ids])
        *automatic, mine = workspace_ids
        # The next whole minute that leaves time to set every schedule.
        due = (datetime.now(UTC) + timedelta(seconds=75)).replace(second=0, microsecond=0)
        schedule = f"CRON_TZ=UTC {due.minute} {due.hour} * * *"
        for workspace_id in automatic:
            reply = api.put(f"/workspaces/{workspace_id}/autostart", json={"schedule": schedule})
            if reply.status_code != 204:
                raise RuntimeError(f"setting autostart failed: {reply.text}")
        print(f"  autostart at {due:%H:%M} UTC; waiting for the executor to queue them …", flush=True)
        while True:
            latest = [api.get(f"/workspaces/{workspace_id}").json()["latest_build"] for workspace_id in automatic]
            if all(build["reason"] == "autostart" for build in latest):
                break
            time.sleep(0.5)
        automatic_jobs = [build["job"]["id"] for build in latest]
        person = build_of(api, mine, "start")
        person_job = wait_for_builds(api, [person])[0]
        jobs = wait_for_builds(api, automatic_jobs)
    finally:
        stop_daemons(processes)
        server.stop()
    durations = [(parse_time(job["completed_at"]) - parse_time(job["started_at"])).total_seconds() for job in jobs]
    one_build = statistics.median(durations)
    waited = (parse_time(person_job["started_at"]) - parse_time(person_job["created_at"])).total_seconds()
    submitted = parse_time(person_job["created_at"])
    behind = sum(1 for job in jobs if parse_time(job["started_at"]) > submitted)
    queued_at = min(parse_time(job["created_at"]) for job in jobs)
    last_automatic = max(parse_time(job["started_at"]) for job in jobs)
    print(f"  one build (median of {len(jobs)}): {one_build:.2f} s")
    print(
        f"  the person's build waited {waited:.2f} s for a daemon = {waited / one_build:.2f} builds "
        f"(target <= 1 build); {behind} automatic builds were still waiting when it was submitted"
    )
    print(f"  at the back of the queue it would have waited about {(last_automatic - submitted).total_seconds():.1f} s "
          f"(the last automatic build started {(last_automatic - queued_at).total_seconds():.1f} s after the flood "
          f"was queued)")  # fmt: skip


if __name__ == "__main__":
    main()
