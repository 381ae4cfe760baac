"""Issue 42's benchmark: prebuilt workspaces.

1. Create -> agent ready (``--ready``, the default): a real server with one built-in daemon and examples/local with
   a preset that keeps one prebuild. Each round times (from sending the create request to the workspace's agent
   "ready" on its latest build, polled every 50 ms) a create with the preset while a prebuild is ready (a claim:
   one start build with the new owner, the running agent handed its new token) and one right after while the pool
   is empty (a normal build), same template, same run; reconciliation is paused while they are timed, so no
   prebuild build competes with them. Medians of --rounds and their ratio (targets: with <= 25 % of without, and
   <= 2 s).
2. The reconciler at scale (``--reconciler``), on PostgreSQL (in process): 200 templates, each with one preset of
   5 instances (with a ttl and a schedule), and their 1,000 prebuilds all ready. Prints the time of one
   reconciliation tick that has nothing to do (median of --rounds; target <= 1 s), the SQL statements of that tick
   with 1,000 and with 2,000 prebuilds that need nothing (must be equal), and the time of a tick that fills 200
   emptied pools (one prebuild missing in each) and queues their builds.

    .venv/bin/python bench/prebuilds.py [--ready] [--reconciler] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from build_overhead import EXAMPLE, SlipwayDeployment
from flask import Flask
from flask_migrate import upgrade
from sqlalchemy import insert, update

from app.catalog.models import Template, TemplateVersion
from app.catalog.presets import preset_id
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.files.models import File
from app.prebuilds.reconciler import run_tick
from app.provisioning.models import ProvisionerJob
from app.users.models import PREBUILDS_USER_ID, User
from app.workspaces.models import Workspace, WorkspaceBuild
from bench._harness import postgres_and_redis
from protocol.provisionerd import (
    JOB_TEMPLATE_IMPORT,
    JOB_WORKSPACE_BUILD,
    PrebuildSchedule,
    PrebuildScheduling,
    Preset,
)
from tests.support.queries import counted

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TEMPLATES = 200
INSTANCES = 5
# Every preset has a ttl and a schedule, so that the tick reads and plans them too (neither applies at NOW: the
# prebuilds are fresh, and the schedule covers the night, in Berlin).
TTL_SECONDS = 86400
NIGHT = PrebuildScheduling(timezone="Europe/Berlin", schedules=(PrebuildSchedule(cron="* 0-5 * * *", instances=1),))


class Pools:
    def __init__(self, app: Flask, *, instances: int) -> None:
        self.app = app
        self.count = 0
        with app.app_context():
            owner = User(username="bench", email="bench@example.com", roles=["owner"])
            db.session.add(owner)
            db.session.flush()
            file = File(sha256="0" * 64, mimetype="application/x-tar", size=5, data=b"bench", created_by=owner.id)
            db.session.add(file)
            db.session.flush()
            self.file_id = file.id
            self.versions: list[tuple[str, str]] = []  # (template id, version id)
            for number in range(TEMPLATES):
                job = ProvisionerJob(
                    type=JOB_TEMPLATE_IMPORT, queue="bench", file_id=file.id, initiator_id=owner.id,
                    started_at=NOW, completed_at=NOW,
                )  # fmt: skip
                db.session.add(job)
                db.session.flush()
                preset = Preset(
                    name="p", parameters=(), desired_prebuild_instances=instances, prebuild_ttl_seconds=TTL_SECONDS,
                    prebuild_scheduling=NIGHT,
                )  # fmt: skip
                version = TemplateVersion(name="v1", job_id=job.id, created_by=owner.id, presets=(preset,))
                db.session.add(version)
                db.session.flush()
                template = Template(name=f"t{number}", active_version_id=version.id, created_by=owner.id)
                db.session.add(template)
                db.session.flush()
                version.template_id = template.id
                self.versions.append((template.id, version.id))
            db.session.commit()
            db.session.remove()

    def add(self, per_template: int) -> None:
        """``per_template`` ready prebuilds (a succeeded start build, no agents) of each template's preset."""
        with self.app.app_context():
            jobs: list[dict[str, object]] = []
            workspaces: list[dict[str, object]] = []
            builds: list[dict[str, object]] = []
            for template_id, version_id in self.versions:
                for _ in range(per_template):
                    number = self.count
                    self.count += 1
                    workspaces.append({
                        "id": f"ws-{number:08d}", "name": f"prebuild-{number}", "name_key": f"prebuild-{number}",
                        "owner_id": PREBUILDS_USER_ID, "template_id": template_id, "deleted": False,
                        "created_at": NOW, "updated_at": NOW, "automatic_updates": "never", "last_used_at": NOW,
                        "latest_build_id": f"b-{number:08d}",
                    })  # fmt: skip
                    jobs.append({
                        "id": f"job-{number:08d}", "type": JOB_WORKSPACE_BUILD, "input": {}, "tags": {},
                        "queue": "bench", "file_id": self.file_id, "initiator_id": PREBUILDS_USER_ID,
                        "created_at": NOW, "updated_at": NOW, "started_at": NOW, "completed_at": NOW,
                        "logs_length": 0, "logs_overflowed": False, "logs_dropped": 0,
                    })  # fmt: skip
                    builds.append({
                        "id": f"b-{number:08d}", "workspace_id": f"ws-{number:08d}", "build_number": 1,
                        "transition": "start", "template_version_id": version_id, "job_id": f"job-{number:08d}",
                        "initiator_id": PREBUILDS_USER_ID, "parameters": [], "created_at": NOW, "reason": "initiator",
                        "template_version_preset_id": preset_id(version_id, "p"),
                    })  # fmt: skip
            db.session.execute(insert(ProvisionerJob), jobs)
            db.session.execute(insert(Workspace), workspaces)
            db.session.execute(insert(WorkspaceBuild), builds)
            db.session.commit()
            db.session.remove()


def tick(app: Flask) -> tuple[float, int, int]:
    with counted(app) as statements, app.app_context():
        began = time.perf_counter()
        report = run_tick(NOW)
        elapsed = time.perf_counter() - began
        db.session.remove()
    return elapsed, len(report.queued), len(statements)


PRESET = """
data "coder_workspace_preset" "quick" {
  name = "Quick"
  parameters = {
    greeting = "prebuilt"
  }
  prebuilds {
    instances = 1
  }
}
"""


def _agents(workspace: dict[str, Any]) -> list[dict[str, Any]]:
    return [agent for resource in workspace["latest_build"]["resources"] for agent in resource["agents"]]


def _ready(workspace: dict[str, Any]) -> bool:
    build, agents = workspace["latest_build"], _agents(workspace)
    return (
        build["transition"] == "start"
        and build["job"]["status"] == "succeeded"
        and bool(agents)
        and all(agent["status"] == "connected" and agent["lifecycle_state"] == "ready" for agent in agents)
    )


def _wait(check: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)  # not faster: a tight poll takes CPU from what it waits for
    raise RuntimeError(f"{what}: not in {timeout:.0f} s")


class ClaimRun:
    """examples/local with a preset of one prebuild on a real server; creates timed with and without a claim."""

    def __init__(self, scratch: Path) -> None:
        template = scratch / "local"
        template.mkdir()
        (template / "main.tf").write_text((EXAMPLE / "main.tf").read_text() + PRESET)
        # The reconciler looks every second (15 s by default): only how soon the pool refills between rounds.
        self.deployment = SlipwayDeployment(scratch, template, "1GiB", env={"SLIPWAY_PREBUILDS_INTERVAL": "1"})
        self.client: httpx.Client = self.deployment.client
        version = self.client.get(f"/templates/{self.deployment.template_id}").json()["active_version_id"]
        self.preset_id = self.client.get(f"/templateversions/{version}/presets").json()[0]["ID"]

    def pause(self, paused: bool) -> None:
        self.client.put("/prebuilds/settings", json={"reconciliation_paused": paused}).raise_for_status()

    def prebuilds(self) -> list[dict[str, Any]]:
        return list(self.client.get("/workspaces", params={"q": "owner:prebuilds"}).json())

    def fill_pool(self) -> None:
        self.pause(False)
        _wait(lambda: any(_ready(workspace) for workspace in self.prebuilds()), "a ready prebuild")
        self.pause(True)

    def create_until_ready(self, name: str) -> tuple[float, float, bool]:
        """Seconds from the create request to the agent ready and to its build's end (the job's completed_at), and
        whether the create claimed a prebuild."""
        pool = {workspace["id"] for workspace in self.prebuilds()}
        began, began_wall = time.monotonic(), time.time()
        body = {"template_id": self.deployment.template_id, "name": name, "template_version_preset_id": self.preset_id}
        reply = self.client.post("/workspaces", json=body)
        reply.raise_for_status()
        workspace_id = reply.json()["id"]
        self.deployment.workspace_ids.append(workspace_id)
        _wait(lambda: _ready(self.client.get(f"/workspaces/{workspace_id}").json()), f"{name} ready", 120)
        ready = time.monotonic() - began
        completed_at = self.client.get(f"/workspaces/{workspace_id}").json()["latest_build"]["job"]["completed_at"]
        build_done = datetime.fromisoformat(completed_at.replace("Z", "+00:00")).timestamp() - began_wall
        return ready, build_done, workspace_id in pool


def ready_with_and_without(rounds: int) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="slipway-bench-prebuilds-"))
    scratch.chmod(0o755)
    load_before = os.getloadavg()
    run = ClaimRun(scratch)
    claimed: list[float] = []
    built: list[float] = []
    claim_builds: list[float] = []
    normal_builds: list[float] = []
    try:
        for number in range(rounds + 1):  # the first round warms the server and the daemon up: not counted
            run.fill_pool()
            with_seconds, claim_build, was_claim = run.create_until_ready(f"c{number}")
            without_seconds, normal_build, was_built = run.create_until_ready(f"n{number}")
            if not was_claim or was_built:
                raise RuntimeError(f"round {number}: the first create must claim, the second build")
            if number:
                claimed.append(with_seconds)
                built.append(without_seconds)
                claim_builds.append(claim_build)
                normal_builds.append(normal_build)
            print(f"round {number}: with a ready prebuild {with_seconds:.2f} s (build done {claim_build:.2f} s), "
                  f"without {without_seconds:.2f} s (build done {normal_build:.2f} s)"
                  + ("" if number else " (warm-up)"))  # fmt: skip
    finally:
        run.deployment.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    with_median, without_median = statistics.median(claimed), statistics.median(built)
    print(f"create -> agent ready on examples/local, median of {rounds}: with a ready prebuild {with_median:.2f} s, "
          f"without {without_median:.2f} s: {with_median / without_median:.0%} "
          "(targets: <= 25 % and <= 2 s)")  # fmt: skip
    print(f"  the start build's end (job completed_at), median: with {statistics.median(claim_builds):.2f} s, "
          f"without {statistics.median(normal_builds):.2f} s")  # fmt: skip
    load_after = os.getloadavg()
    print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} CPUs")


def reconciler_at_scale(rounds: int) -> None:
    with postgres_and_redis("prebuilds") as (_, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        pools = Pools(app, instances=INSTANCES)
        pools.add(INSTANCES)
        tick(app)  # warm
        quiet = [tick(app) for _ in range(rounds)]
        assert all(queued == 0 for _, queued, _ in quiet), "a full pool queued builds"
        median_ms = statistics.median(t for t, _, _ in quiet) * 1000
        worst_ms = max(t for t, _, _ in quiet) * 1000
        print(f"{TEMPLATES} presets, {pools.count} ready prebuilds, nothing to do: tick median {median_ms:.0f} ms, "
              f"max {worst_ms:.0f} ms, {quiet[0][2]} statements")  # fmt: skip
        # As many rows again, deleted (claimed or replaced long ago): a tick's statements must not grow with them.
        pools.add(INSTANCES)
        with app.app_context():
            db.session.execute(
                update(Workspace).where(Workspace.id >= f"ws-{TEMPLATES * INSTANCES:08d}").values(deleted=True)
            )
            db.session.commit()
            db.session.remove()
        doubled = tick(app)
        print(f"with {pools.count} prebuild rows ({pools.count // 2} deleted): {doubled[2]} statements "
              f"(must equal {quiet[0][2]}), {doubled[0] * 1000:.0f} ms")  # fmt: skip
        with app.app_context():  # one prebuild of each pool goes: the next tick fills 200 pools
            gone = [f"ws-{n * INSTANCES:08d}" for n in range(TEMPLATES)]
            db.session.execute(update(Workspace).where(Workspace.id.in_(gone)).values(deleted=True))
            db.session.commit()
            db.session.remove()
        fill = tick(app)
        print(f"fill 200 pools (one missing each): {fill[1]} builds queued in {fill[0] * 1000:.0f} ms, "
              f"{fill[2]} statements")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ready", action="store_true", help="create -> agent ready, with and without a prebuild")
    parser.add_argument("--reconciler", action="store_true", help="the reconciler's tick at scale (PostgreSQL)")
    args = parser.parse_args()
    if args.ready or not args.reconciler:
        ready_with_and_without(args.rounds)
    if args.reconciler:
        reconciler_at_scale(args.rounds)


if __name__ == "__main__":
    main()
