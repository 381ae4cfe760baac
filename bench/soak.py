"""Soak: two web replicas on one PostgreSQL and one Redis under builds and live log viewers, one replica killed -9
(with its children) half way and started again on its port.

10 external daemons (PSK, half on each replica) run real Terraform builds of a template that prints numbered lines;
200 builds (workspaces created, stopped, started, stopped) are spread over the run, asked of the replicas in turn;
200 viewers follow a build's log over SSE from a replica and, when the connection drops, resume at a random replica
after the last event id (as EventSource does). At the end it prints what finished, whether every viewer saw every
line of its build exactly once and no build was applied twice, build durations, API latency during the run, the
killed replica's downtime and each replica's peak memory. It exits 1 when a correctness check fails (timings are
only printed).

    .venv/bin/python bench/soak.py [--minutes 10] [--replicas 2] [--daemons 10] [--builds 200] [--viewers 200]
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
from tests.support.soak import SoakPlan, figures, soak_deployment


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="over which the builds are started")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--daemons", type=int, default=10)
    parser.add_argument("--builds", type=int, default=200)
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--lines", type=int, default=100, help="numbered lines each build prints")
    parser.add_argument("--line-pause", type=float, default=0.05, help="seconds between two of them")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.replicas < 2:
        parser.error("--replicas must be at least 2: one of them is killed")
    plan = SoakPlan(
        seconds=args.minutes * 60, replicas=args.replicas, daemons=args.daemons, builds=args.builds,
        viewers=args.viewers, lines_per_build=args.lines, line_pause=args.line_pause, seed=args.seed,
    )  # fmt: skip
    began = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - began:7.1f} s] {line}", flush=True)

    root = Path(tempfile.mkdtemp(prefix="slipway-soak-"))
    cluster = PostgresCluster()
    cluster.start()
    try:
        with soak_deployment(plan, root, cluster) as soak:
            progress("deployment up: replicas, daemons registered, template imported")
            report = soak.run(progress)
    finally:
        cluster.stop()
    print("\n".join(figures(report)))
    problems = report.problems()
    for problem in problems[:50]:
        print(f"PROBLEM: {problem}")
    if problems:
        print(f"{len(problems)} correctness problem(s); the replicas' and daemons' logs are in {root}")
        return 1
    shutil.rmtree(root, ignore_errors=True)
    print("correctness: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
