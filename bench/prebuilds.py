"""The prebuilds reconciler at scale, on PostgreSQL (in process): 200 templates, each with one preset of 5
instances (with a ttl and a schedule), and their 1,000 prebuilds all ready.

Prints
- the time of one reconciliation tick that has nothing to do (median of --rounds; target ≤ 1 s),
- the SQL statements of that tick with 1,000 and with 2,000 prebuilds that need nothing (must be equal),
- the time of a tick that fills 200 emptied pools (one prebuild missing in each) and queues their builds.

The create → agent ready comparison (a ready prebuild against none) is not measured here yet.

    .venv/bin/python bench/prebuilds.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with postgres_and_redis("prebuilds") as (_, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        pools = Pools(app, instances=INSTANCES)
        pools.add(INSTANCES)
        tick(app)  # warm
        quiet = [tick(app) for _ in range(args.rounds)]
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


if __name__ == "__main__":
    main()
