"""Start-up as a person waits for it: `slipway server` until /healthz answers 200, from an empty data dir and from
an existing one, on SQLite and on PostgreSQL (targets ≤ 2 s empty, ≤ 1.5 s existing on SQLite, ≤ 3 s on
PostgreSQL); and client commands from the shell prompt to their exit, interpreter included (target ≤ 250 ms;
`slipway ssh ws -- true` into a ready workspace of examples/local ≤ 600 ms).

Medians over --runs. `--slipway PATH` times another installation's `slipway` (e.g. the main checkout's, for a
before/after in one run of this script).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
import _harness  # noqa: E402
import psutil  # noqa: E402
from _harness import Server, median, postgres_and_redis, sign_up_owner  # noqa: E402

CLI_COMMANDS = (["list"], ["whoami"], ["show", "no-such-workspace"], ["--version"])


def timed_start(data_dir: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds until /healthz answered 200, and the CPU seconds the server's processes had used by then."""
    server = Server(extra_args=(), env=env, data_dir=data_dir)
    try:
        wall = server.start().cold_start_seconds
        return wall, _tree_cpu(server)
    finally:
        server.stop()


def _tree_cpu(server: Server) -> float:
    assert server.process is not None
    root = psutil.Process(server.process.pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        # children_*: what its children that already exited used (a probe, a sandbox check).
        total += times.user + times.system + times.children_user + times.children_system
    return total


def server_starts(runs: int, env_for_run: Callable[[], dict[str, str]], label: str) -> None:
    empty = [timed_start(Path(tempfile.mkdtemp(prefix="slipway-bench-")), env_for_run()) for _ in range(runs)]
    data_dir = Path(tempfile.mkdtemp(prefix="slipway-bench-"))
    env = env_for_run()
    timed_start(data_dir, env)  # creates the database; the runs below find it
    existing = [timed_start(data_dir, env) for _ in range(runs)]
    for kind, results in (("empty", empty), ("existing", existing)):
        walls, cpus = [wall for wall, _ in results], [cpu for _, cpu in results]
        # CPU seconds too: on a busy machine the wall time says more about the neighbours than about Slipway.
        print(
            f"server, {label}, {kind + ' data dir':<18} median {median(walls):5.2f} s wall, {median(cpus):5.2f} s CPU"
            f"   runs {_runs(walls)}"
        )


def cli_commands(runs: int) -> None:
    server = Server(env={}).start()  # no daemons: they have nothing to do with the CLI
    try:
        _, token = sign_up_owner(server.url)
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        env.update(SLIPWAY_URL=server.url, SLIPWAY_SESSION_TOKEN=token)
        for arguments in CLI_COMMANDS:
            _time_command(list(arguments), env, runs)
    finally:
        server.stop()


def ssh_command(runs: int) -> None:
    """`slipway ssh ws -- true` (target ≤ 600 ms): a workspace of examples/local with its agent ready, as in
    bench/ready.py."""
    from build_overhead import EXAMPLE, SlipwayDeployment
    from ready import wait_ready

    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-ssh-"))
    scratch.chmod(0o755)
    deployment = SlipwayDeployment(scratch, EXAMPLE, "1GiB")
    try:
        reply = deployment.client.post("/workspaces", json={"template_id": deployment.template_id, "name": "ws"})
        reply.raise_for_status()
        deployment.workspace_ids.append(reply.json()["id"])
        wait_ready(deployment.client, reply.json()["id"])
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLIPWAY_")}
        token = str(deployment.client.headers["Authorization"]).removeprefix("Bearer ")
        env.update(SLIPWAY_URL=deployment.server.url, SLIPWAY_SESSION_TOKEN=token)
        _time_command(["ssh", "ws", "--", "true"], env, runs, must_succeed=True)
    finally:
        deployment.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _time_command(arguments: list[str], env: dict[str, str], runs: int, *, must_succeed: bool = False) -> None:
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        done = subprocess.run([_harness.SLIPWAY, *arguments], env=env, capture_output=True, check=False)
        if must_succeed and done.returncode != 0:
            raise RuntimeError(f"slipway {' '.join(arguments)} failed: {done.stderr.decode(errors='replace')}")
        walls.append(time.perf_counter() - began)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    command = " ".join(arguments)
    # CPU time (user + system) too: on a busy machine the wall time says more about the neighbours.
    print(
        f"slipway {command:<28} median {median(walls) * 1000:4.0f} ms wall, {median(cpus) * 1000:4.0f} ms CPU"
        f"   runs {_runs(walls, 1000)}"
    )


def _runs(values: list[float], scale: float = 1.0) -> str:
    return " ".join(f"{value * scale:.2f}" if scale == 1.0 else f"{value * scale:.0f}" for value in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slipway", default=_harness.SLIPWAY, help="the slipway executable to time")
    parser.add_argument("--skip", action="append", default=[], choices=["sqlite", "postgresql", "cli"])
    args = parser.parse_args()
    _harness.SLIPWAY = args.slipway
    print(f"{args.slipway}, medians of {args.runs} runs")
    if "cli" not in args.skip:
        cli_commands(args.runs)
        ssh_command(args.runs)
    if "sqlite" not in args.skip:
        server_starts(args.runs, dict, "SQLite")
    if "postgresql" not in args.skip:
        with postgres_and_redis("startup_unused") as (cluster, external):

            def fresh_database() -> dict[str, str]:
                name = f"startup_{uuid.uuid4().hex[:12]}"
                cluster.execute(f"CREATE DATABASE {name}")
                # No built-in daemons: run as root, their user cannot reach the external Redis's socket (mode 0700).
                return {
                    **external,
                    "SLIPWAY_DATABASE_URL": cluster.url(name),
                    "SLIPWAY_PROVISIONER_DAEMONS": "0",
                }

            server_starts(args.runs, fresh_database, "PostgreSQL")


if __name__ == "__main__":
    main()
