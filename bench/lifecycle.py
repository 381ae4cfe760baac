"""The lifecycle executor at scale, on PostgreSQL: 10,000 workspaces, 1,000 of them due in the same minute.

Prints
- the time of one tick to find the due workspaces and queue their builds (median of --rounds; target ≤ 2 s),
- the statements a tick runs with 900 and with 9,000 workspaces that are not due (the same 100 due): they must
  be equal,
- the delay from a workspace's due time to its build being queued, with ticks every 60 s of simulated time and
  1,000 due times spread over an hour (p50/p99; target p99 ≤ 60 s + a tick).

    .venv/bin/python bench/lifecycle.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask import Flask
from flask_migrate import upgrade
from sqlalchemy import delete, insert, select, update

from app.catalog.models import Template, TemplateVersion
from app.core.config import load_settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.factory import create_app
from app.files.models import File
from app.lifecycle.executor import run_tick
from app.lifecycle.models import LifecycleTick
from app.provisioning.models import ProvisionerJob
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from bench._harness import postgres_and_redis
from protocol.provisionerd import JOB_TEMPLATE_IMPORT, JOB_WORKSPACE_BUILD
from tests.support.queries import counted

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Fleet:
    """Workspaces inserted in bulk: each with one succeeded start build whose deadline decides when it is due."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.count = 0
        with app.app_context():
            owner = User(username="bench", email="bench@example.com", roles=["owner"])
            db.session.add(owner)
            db.session.flush()
            file = File(sha256="0" * 64, mimetype="application/x-tar", size=5, data=b"bench", created_by=owner.id)
            db.session.add(file)
            db.session.flush()
            job = ProvisionerJob(
                type=JOB_TEMPLATE_IMPORT, queue="bench", file_id=file.id, initiator_id=owner.id,
                started_at=NOW, completed_at=NOW,
            )  # fmt: skip
            db.session.add(job)
            db.session.flush()
            version = TemplateVersion(name="v1", job_id=job.id, created_by=owner.id)
            db.session.add(version)
            db.session.flush()
            template = Template(name="bench", active_version_id=version.id, created_by=owner.id)
            db.session.add(template)
            db.session.flush()
            version.template_id = template.id
            db.session.commit()
            self.owner_id, self.file_id, self.version_id, self.template_id = owner.id, file.id, version.id, template.id
            db.session.remove()

    def add(self, deadlines: list[datetime], *, stopped: bool = False) -> None:
        """Workspaces started once with these deadlines; ``stopped``: then stopped (the deadline, long past, is
        history a tick must not read)."""
        with self.app.app_context():
            for chunk in range(0, len(deadlines), 2000):
                jobs: list[dict[str, object]] = []
                workspaces: list[dict[str, object]] = []
                builds: list[dict[str, object]] = []
                for deadline in deadlines[chunk : chunk + 2000]:
                    number = self.count
                    self.count += 1
                    workspace_id = f"ws-{number:08d}"
                    workspaces.append({
                        "id": workspace_id, "name": f"w{number}", "name_key": f"w{number}", "owner_id": self.owner_id,
                        "template_id": self.template_id, "deleted": False, "created_at": NOW, "updated_at": NOW,
                        "automatic_updates": "never", "last_used_at": NOW,
                        "latest_build_id": f"b-{number:08d}-{2 if stopped else 1}",
                    })  # fmt: skip
                    for build_number, transition in ((1, "start"), (2, "stop"))[: 2 if stopped else 1]:
                        job_id = f"job-{number:08d}-{build_number}"
                        jobs.append({
                            "id": job_id, "type": JOB_WORKSPACE_BUILD, "input": {}, "tags": {}, "queue": "bench",
                            "file_id": self.file_id, "initiator_id": self.owner_id, "created_at": NOW,
                            "updated_at": NOW, "started_at": NOW, "completed_at": NOW, "logs_length": 0,
                            "logs_overflowed": False, "logs_dropped": 0,
                        })  # fmt: skip
                        builds.append({
                            "id": f"b-{number:08d}-{build_number}", "workspace_id": workspace_id,
                            "build_number": build_number, "transition": transition,
                            "template_version_id": self.version_id, "job_id": job_id, "initiator_id": self.owner_id,
                            "parameters": [], "created_at": NOW, "reason": "initiator",
                            "deadline": deadline if transition == "start" else None,
                        })  # fmt: skip
                db.session.execute(insert(ProvisionerJob), jobs)
                db.session.execute(insert(Workspace), workspaces)
                db.session.execute(insert(WorkspaceBuild), builds)
            db.session.commit()
            db.session.remove()

    def reset(self) -> None:
        """Forget what ticks queued: their builds and jobs, the Redis queues, the last minute acted on."""
        with self.app.app_context():
            job_ids = list(
                db.session.scalars(select(WorkspaceBuild.job_id).where(WorkspaceBuild.reason != "initiator"))
            )
            db.session.execute(delete(WorkspaceBuild).where(WorkspaceBuild.reason != "initiator"))
            db.session.execute(delete(ProvisionerJob).where(ProvisionerJob.id.in_(job_ids)))
            db.session.execute(update(LifecycleTick).values(tick_at=None, fence=0))
            db.session.commit()
            db.session.remove()
            get_redis().flushdb()


def tick(app: Flask, at: datetime) -> tuple[float, int]:
    with app.app_context():
        began = time.perf_counter()
        report = run_tick(at)
        elapsed = time.perf_counter() - began
        db.session.remove()
    return elapsed, len(report.queued)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with postgres_and_redis("lifecycle") as (_, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        run(app, args.rounds)


def run(app: Flask, rounds: int) -> None:
    fleet = Fleet(app)
    later = NOW + timedelta(days=365)
    due = [NOW - timedelta(seconds=random.uniform(1, 59)) for _ in range(100)]
    long_ago = NOW - timedelta(days=30)
    # Not due: half running with a deadline ahead, half stopped long ago with a past deadline in their history.
    fleet.add([later] * 450 + due)
    fleet.add([long_ago] * 450, stopped=True)
    tick(app, NOW - timedelta(minutes=5))  # the first tick ever creates the executor's row: not counted
    with counted(app) as small:
        _, queued = tick(app, NOW)
    assert queued == 100, queued
    fleet.reset()
    fleet.add([later] * 4050)
    fleet.add([long_ago] * 4050, stopped=True)
    with counted(app) as large:
        tick(app, NOW)
    fleet.reset()
    print(
        f"statements per tick, 100 due: {len(small)} with 900 not due, {len(large)} with 9,000 not due "
        "(half of them stopped, with past deadlines in their history)"
    )

    fleet.add([NOW - timedelta(seconds=random.uniform(1, 59)) for _ in range(900)])
    times = []
    for _ in range(rounds):
        elapsed, queued = tick(app, NOW)
        assert queued == 1000, queued
        times.append(elapsed)
        fleet.reset()
    print(
        f"one tick, 1,000 due of {fleet.count:,} workspaces: median {statistics.median(times):.2f} s "
        f"(rounds: {', '.join(f'{value:.2f}' for value in times)}; target ≤ 2 s)"
    )
    delays(app, fleet)


def delays(app: Flask, fleet: Fleet) -> None:
    """Due times spread over an hour, ticks at each minute (plus the tick's own time): due → queued."""
    with app.app_context():
        # Move the 1,000 due ones over the next hour.
        builds = list(
            db.session.scalars(
                select(WorkspaceBuild).where(
                    WorkspaceBuild.deadline <= NOW, WorkspaceBuild.deadline > NOW - timedelta(days=1)
                )
            )
        )
        for build in builds:
            build.deadline = NOW + timedelta(seconds=random.uniform(0, 3600))
        db.session.commit()
        due = {build.workspace_id: build.deadline for build in builds}
        db.session.remove()
    measured: list[float] = []
    for minute in range(1, 62):
        at = NOW + timedelta(minutes=minute)
        with app.app_context():
            began = time.perf_counter()
            report = run_tick(at)
            elapsed = time.perf_counter() - began
            db.session.remove()
        for workspace_id, _ in report.queued:
            deadline = due[workspace_id]
            assert deadline is not None
            measured.append((at - deadline).total_seconds() + elapsed)
    measured.sort()
    p50, p99 = statistics.median(measured), measured[int(len(measured) * 0.99) - 1]
    print(
        f"due → queued over {len(measured)} workspaces, a tick a minute: p50 {p50:.1f} s, p99 {p99:.1f} s "
        "(target ≤ 60 s + tick)"
    )


if __name__ == "__main__":
    main()
