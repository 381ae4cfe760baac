"""Issue 43 benchmark: create -> agent ready on examples/local, per phase (target: median <= 2 s).

A server with one built-in daemon and examples/local imported; K workspaces created one after another through the
API, each timed from sending the create request to its agent's lifecycle "ready", cut into phases by the times the
server and the workspace record:

- pickup:     request sent -> the build's job started (the daemon acquired it)
- build:      job started -> the workspace's process spawned (Terraform up to the `local-exec` that starts the
              agent; its `workspace.pid` file's time)
- agent up:   process spawned -> the agent's first connection (interpreter start, imports, the control WebSocket)
- manifest:   first connection -> lifecycle "starting" (manifest read, start-up reported)
- scripts:    "starting" -> "ready" (the startup script, its log sent, the lifecycle report)
and the build's own end (job completed_at) for reference: the agent starts while the build finishes.

The first workspace of a fresh server is reported on its own (the issue's "3.7 s on the first try").

    .venv/bin/python bench/ready.py [--workspaces 7]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_overhead import EXAMPLE, SlipwayDeployment, parse_time, wait_job

PHASES = ("pickup", "build", "agent up", "manifest", "scripts")


def wait_ready(client: httpx.Client, workspace_id: str, timeout: float = 60.0) -> dict[str, object]:
    """The workspace's agent once its lifecycle is ready (or failed: then the run is not a measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workspace = client.get(f"/workspaces/{workspace_id}").json()
        agents = [agent for resource in workspace["latest_build"]["resources"] for agent in resource["agents"]]
        if agents and agents[0]["lifecycle_state"] in ("ready", "start_error", "start_timeout"):
            if agents[0]["lifecycle_state"] != "ready":
                raise RuntimeError(f"the agent of {workspace_id} ended {agents[0]['lifecycle_state']}")
            agent: dict[str, object] = agents[0]
            return agent
        # Not faster: a tight poll takes CPU from the agent it waits for; the figures come from recorded times.
        time.sleep(0.05)
    raise RuntimeError(f"the agent of {workspace_id} was not ready in {timeout:.0f} s")


def create_until_ready(deployment: SlipwayDeployment, index: int, workspaces_root: Path) -> dict[str, float]:
    """Seconds of each phase (and "total", "build done") for one new workspace."""
    began = time.time()  # wall clock, as the server's and the file system's times are (same machine)
    reply = deployment.client.post("/workspaces", json={"template_id": deployment.template_id, "name": f"r{index}"})
    reply.raise_for_status()
    workspace = reply.json()
    deployment.workspace_ids.append(workspace["id"])
    agent = wait_ready(deployment.client, workspace["id"])
    job = wait_job(deployment.client, f"/workspacebuilds/{workspace['latest_build']['id']}")
    (pid_file,) = workspaces_root.glob(f"*/r{index}/workspace.pid")
    moments = {
        "job started": parse_time(job["started_at"]).timestamp(),
        "spawned": pid_file.stat().st_mtime,
        "connected": parse_time(agent["first_connected_at"]).timestamp(),
        "starting": parse_time(agent["started_at"]).timestamp(),
        "ready": parse_time(agent["ready_at"]).timestamp(),
    }
    # The agent came up before the build had finished and was turned away (401) at least once.
    agent_log = pid_file.parent / ".slipway-agent" / "slipway-agent.log"
    waited = "waiting for the server" in agent_log.read_text(errors="replace") if agent_log.exists() else False
    marks = [began, *moments.values()]
    phases = {name: marks[n + 1] - marks[n] for n, name in enumerate(PHASES)}
    build_done = parse_time(job["completed_at"]).timestamp() - began
    return phases | {"total": moments["ready"] - began, "build done": build_done, "turned away": float(waited)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspaces", type=int, default=7, help="workspaces created after the first")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-ready-"))
    scratch.chmod(0o755)
    deployment = SlipwayDeployment(scratch, EXAMPLE, "1GiB")
    workspaces_root = scratch / f"slipway-{deployment.label}"
    try:
        runs = [create_until_ready(deployment, index, workspaces_root) for index in range(args.workspaces + 1)]
    finally:
        deployment.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report(runs[0], runs[1:])


def report(first: dict[str, float], rest: list[dict[str, float]]) -> None:
    columns = (*PHASES, "build done", "total")
    print(f"create -> agent ready on examples/local, {len(rest)} workspaces after the first (seconds)")
    print(f"{'':22}" + "".join(f"{name:>11}" for name in columns))
    print(f"{'first on a new server':22}" + "".join(f"{first[name]:11.3f}" for name in columns))
    medians = {name: statistics.median(run[name] for run in rest) for name in columns}
    print(f"{'median':22}" + "".join(f"{medians[name]:11.3f}" for name in columns))
    print(f"{'max':22}" + "".join(f"{max(run[name] for run in rest):11.3f}" for name in columns))
    totals = ", ".join(f"{run['total']:.2f}" for run in rest)
    print(f"all totals: {totals}")
    turned_away = sum(int(run["turned away"]) for run in [first, *rest])
    print(f"agents turned away at first (up before their build was done): {turned_away} of {len(rest) + 1}")
    print(f"median total {medians['total']:.2f} s (target <= 2 s)   at {datetime.now().isoformat(timespec='seconds')}")


if __name__ == "__main__":
    main()
