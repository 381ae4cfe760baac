"""Deployment figures, one section each; this file holds the rolling restart's (another section adds the image's).

Rolling restart: 3 web replicas on one PostgreSQL and one Redis behind nginx (Debian's), each with a drain period;
external daemons reach the servers through nginx, as do the viewers. Builds print numbered lines slowly while
viewers follow their logs over SSE, resuming after the last event id when a stream ends (as EventSource does). The
replicas are then restarted one at a time as Kubernetes rolls a Deployment: SIGTERM, wait until it has stopped,
start it again, and the next only once it answers /healthz. Printed: each viewer's time back after its stream ended
(p50, p99; target p99 <= 5 s), log lines lost or received twice (target 0), builds that did not succeed, and the
5xx answers nginx gave. Exits 1 when a line was lost or repeated or a build failed.

    .venv/bin/python bench/deploy.py [--builds 6] [--viewers 24] [--drain 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.postgres import PostgresCluster
from tests.support.rolling import lost_and_repeated, rolling_deployment, rolling_restart
from tests.support.soak import percentile


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
            started = deployment.start_builds(builds, "rolling")
            followers, threads = deployment.follow(started, viewers)
            log(f"{builds} builds of {lines} lines ({pause * 1000:.0f} ms apart), {viewers} viewers following")
            away = rolling_restart(deployment.replicas, log)
            outcomes, stored = deployment.finish(started, threads)
            proxied = deployment.proxied()
    finally:
        cluster.stop()
    lost, repeated, disordered = lost_and_repeated(followers, stored, lines)
    back = [seconds for f in followers for seconds in f.back_seconds]
    failed = [o for o in outcomes if o["status"] != "succeeded"]
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
    ]
    clean = lost == 0 and repeated == 0 and disordered == 0 and not failed
    if clean:
        shutil.rmtree(root, ignore_errors=True)
    else:
        figures.append(f"logs kept in {root}")
    return figures, clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=6, help="builds (and external daemons) under way")
    parser.add_argument("--viewers", type=int, default=24, help="log streams followed, spread over the builds")
    parser.add_argument("--drain", type=int, default=3, help="each replica's --drain-period, seconds")
    parser.add_argument("--lines", type=int, default=1200, help="numbered lines each build prints")
    parser.add_argument("--line-pause", type=float, default=0.1, help="seconds between two of them")
    args = parser.parse_args()
    figures, clean = rolling_restart_figures(args.builds, args.viewers, args.drain, args.lines, args.line_pause)
    print("\n".join(figures))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
