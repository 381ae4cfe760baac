"""Deploying Slipway, measured. One script, in sections (`--section NAME`, repeatable; default: all):

image   `deploy/image/build.py` from scratch (wall and user+sys CPU time, target ≤ 5 min), the image's compressed
        size (target ≤ 250 MB) and the docker archive's; a second build reusing the Debian stage, whose config
        digest must be the first's (reproducible); cold start of the containerised `slipway server` (podman, a new
        container each run, its data dir empty) until /healthz answers 200, on SQLite (target ≤ 3 s) and on
        PostgreSQL with Redis (target ≤ 4 s): medians over --runs.

rolling 3 web replicas on one PostgreSQL and one Redis behind nginx (Debian's), each with a drain period;
        external daemons reach the servers through nginx, as do the viewers. Builds print numbered lines slowly
        while viewers follow their logs over SSE, resuming after the last event id when a stream ends (as
        EventSource does). The replicas are restarted one at a time as Kubernetes rolls a Deployment: SIGTERM, wait
        until it has stopped, start it again, the next only once it answers /healthz. Printed: each viewer's time
        back after its stream ended (p50, p99; target p99 <= 5 s), log lines lost or received twice (target 0),
        builds that did not succeed, and the 5xx answers nginx gave. Meanwhile a workspace of examples/local (its
        agent connected through nginx) is in use: its agent reached over a new tunnel every 0.25 s (the agent's
        time back after its replica went: p50, p99, target p99 <= 5 s), its app open, and a `slipway ssh`
        session held (ended sessions and their time back). Exits 1 when a line was lost or repeated or a
        build failed.

    .venv/bin/python bench/deploy.py [--section image|rolling] [--runs 5] [--builds 6] [--viewers 24] [--drain 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _harness import free_port, median  # noqa: E402

from tests.support.container import Podman, build_image, read_layout  # noqa: E402
from tests.support.postgres import PostgresCluster  # noqa: E402
from tests.support.rolling import lost_and_repeated, rolling_deployment, rolling_restart  # noqa: E402
from tests.support.soak import percentile  # noqa: E402


@contextmanager
def postgres_and_tcp_redis() -> Iterator[tuple[str, str]]:
    """A PostgreSQL cluster and a Redis on 127.0.0.1: the container's user cannot enter a private socket dir."""
    from app.server.embedded_redis import start_embedded_redis
    from app.server.processes import stop
    from tests.support.postgres import PostgresCluster

    cluster = PostgresCluster()
    cluster.start()
    port = free_port()
    redis_process = start_embedded_redis(Path(tempfile.mkdtemp(prefix="slipway-bench-redis-")), tcp_port=port)
    try:
        yield cluster.url("postgres"), f"redis://127.0.0.1:{port}/0"
    finally:
        stop([redis_process], grace=5)
        cluster.stop()


def cold_start(podman: Podman, image: str, env: dict[str, str], log: Path) -> float:
    """Seconds from `podman run` to the first /healthz 200 of a new container."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**env, "SLIPWAY_ADDRESS": f"127.0.0.1:{port}", "SLIPWAY_ACCESS_URL": url, "SLIPWAY_PROVISIONER_DAEMONS": "0"}
    began = time.perf_counter()
    container = podman.run(image, f"slipway-bench-{port}", "server", env=env, log=log)
    container.url = url
    try:
        container.wait_healthy()
        return time.perf_counter() - began
    finally:
        container.stop()


def image_section(runs: int, scratch: Path) -> None:
    out = scratch / "dist"
    stage = scratch / "debian-stage"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, _output = build_image(out, "--debian-stage", str(stage))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The machine is shared: CPU time says what the build costs, wall time what the neighbours left it.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    index, manifest, _config = read_layout(out / "image")
    compressed = sum(layer["size"] for layer in manifest["layers"]) / 2**20
    archive = (out / "slipway-image.tar").stat().st_size / 2**20
    print(f"load average at the build's end   {os.getloadavg()[0]:6.2f}")
    print(f"image build (from scratch)        {seconds:6.1f} s        (target ≤ 300 s)   user+sys {cpu:.1f} s")
    print(f"image compressed                  {compressed:6.1f} MiB      (target ≤ 250 MB)")
    print(f"docker archive (uncompressed)     {archive:6.1f} MiB")
    # Two runs at one commit print one digest: the build is reproducible.
    print(f"image digest                      {index['manifests'][0]['digest']}")
    again, output = build_image(scratch / "again", "--debian-stage", str(stage), "--config-digest")
    digest = next(line.split()[1] for line in output.splitlines() if line.startswith("config sha256:"))
    same = "same config" if digest == manifest["config"]["digest"] else f"DIFFERENT config {digest}"
    print(f"second build (stage reused)       {again:6.1f} s        {same}")
    podman = Podman(scratch / "podman")
    try:
        image = podman.load(out / "image")
        sqlite = [cold_start(podman, image, {}, scratch / "sqlite.log") for _ in range(runs)]
        _report("cold start to /healthz, SQLite", sqlite, 3.0)
        with postgres_and_tcp_redis() as (database_url, redis_url):
            # One secret key for all runs: each container's data dir is new, the database's encrypted secrets not.
            env = {"SLIPWAY_DATABASE_URL": database_url, "SLIPWAY_REDIS_URL": redis_url, "SLIPWAY_SECRET_KEY": "bench"}
            # Each run a new container on the same database: the first migrates it, like a first deployment.
            postgres = [cold_start(podman, image, env, scratch / "postgres.log") for _ in range(runs)]
        _report("cold start to /healthz, PostgreSQL", postgres, 4.0)
    finally:
        podman.close()


def _report(label: str, seconds: list[float], target: float) -> None:
    runs = " ".join(f"{value:.2f}" for value in seconds)
    print(f"{label:<34}{median(seconds):6.2f} s median (target ≤ {target:.0f} s)   runs {runs}")


def rolling_restart_figures(builds: int, viewers: int, drain: int, lines: int, pause: float) -> tuple[list[str], bool]:
    """The rolling restart's section: its figures, and whether nothing was lost or repeated and every build
    succeeded."""
    began = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {line}", flush=True)

    root = Path(tempfile.mkdtemp(prefix="slipway-rolling-"))
    cluster = PostgresCluster()
    cluster.start()
    try:
        with rolling_deployment(
            root, cluster, daemons=builds, drain=drain, lines=lines, pause=pause, viewers=viewers
        ) as deployment:
            log(f"3 replicas behind nginx at {deployment.url}, {builds} external daemons")
            held = deployment.hold_workspace_open()
            log("a workspace in use: its agent probed, its app open, an SSH session held")
            started = deployment.start_builds(builds, "rolling")
            followers, threads = deployment.follow(started, viewers)
            log(f"{builds} builds of {lines} lines ({pause * 1000:.0f} ms apart), {viewers} viewers following")
            away = rolling_restart(deployment.replicas, log)
            held.stop()
            outcomes, stored = deployment.finish(started, threads)
            proxied = deployment.proxied()
    finally:
        cluster.stop()
    lost, repeated, disordered = lost_and_repeated(followers, stored, lines)
    back = [seconds for f in followers for seconds in f.back_seconds]
    failed = [o for o in outcomes if o["status"] != "succeeded"]
    agent_out = held.agent.out_seconds or [0.0]  # never out: back at once
    errors = [fields for fields in proxied if fields[0].startswith("5")]
    figures = [
        f"rolling restart of 3 replicas (drain {drain} s) behind nginx: each away for "
        + ", ".join(f"{seconds:.1f} s" for seconds in away),
        f"followed log streams back after their replica went: {len(back)} reconnections, "
        f"p50 {percentile(back, 0.5):.2f} s, p99 {percentile(back, 0.99):.2f} s (target p99 <= 5 s)",
        f"log lines lost: {lost}, received twice: {repeated}, viewers whose numbered lines were not 1..{lines} in "
        f"order: {disordered} (targets 0)",
        f"builds: {len(outcomes) - len(failed)} succeeded, {len(failed)} did not",
        f"nginx: {len(proxied)} requests, {len(errors)} answered 5xx"
        + (": " + "; ".join(" ".join(fields) for fields in errors[:5]) if errors else ""),
        f"viewers refused on reconnect: {sorted({s for f in followers for s in f.refused})}",
        f"agent back after its replica went: {len(held.agent.out_seconds)} times out of {held.agent.tries} tries, "
        f"p50 {percentile(agent_out, 0.5):.2f} s, p99 {percentile(agent_out, 0.99):.2f} s "
        f"(target p99 <= 5 s); failed tries: {sorted(set(held.agent.failures))[:3]}",
        f"app open: {held.app.tries} requests, {len(held.app.failures)} failed",
        f"SSH sessions ended by a draining replica: {len(held.ssh.ends)}, back in "
        + ", ".join(f"{seconds:.1f} s" for seconds in held.ssh.back_seconds)
        + f"; said: {sorted({said.splitlines()[-1] for _, said in held.ssh.ends})}",
    ]
    clean = lost == 0 and repeated == 0 and disordered == 0 and not failed
    if clean:
        shutil.rmtree(root, ignore_errors=True)
    else:
        figures.append(f"logs kept in {root}")
    return figures, clean


def rolling_section(args: argparse.Namespace) -> bool:
    figures, clean = rolling_restart_figures(args.builds, args.viewers, args.drain, args.lines, args.line_pause)
    print("\n".join(figures))
    return clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", action="append", choices=["image", "rolling"], help="(repeatable) default: all")
    parser.add_argument("--runs", type=int, default=5, help="image: cold starts per database")
    parser.add_argument("--builds", type=int, default=6, help="rolling: builds (and external daemons) under way")
    parser.add_argument("--viewers", type=int, default=24, help="rolling: log streams followed, over the builds")
    parser.add_argument("--drain", type=int, default=3, help="rolling: each replica's --drain-period, seconds")
    parser.add_argument("--lines", type=int, default=1200, help="rolling: numbered lines each build prints")
    parser.add_argument("--line-pause", type=float, default=0.1, help="rolling: seconds between two of them")
    args = parser.parse_args()
    clean = True
    with tempfile.TemporaryDirectory(prefix="slipway-bench-deploy-") as scratch:
        for name in args.section or ["image", "rolling"]:
            print(f"== {name}", flush=True)
            if name == "image":
                image_section(args.runs, Path(scratch))
            else:
                clean = rolling_section(args) and clean
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
