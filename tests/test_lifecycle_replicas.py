"""Two replicas tick the lifecycle executor at the same moments (two processes, one database and Redis): each
minute is acted on by exactly one of them, and each due workspace gets exactly one build."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import case, func, select

from app.core.config import Settings, load_settings
from app.core.extensions import db
from app.users.models import User
from app.workspaces import services
from app.workspaces.models import WorkspaceBuild
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")

WORKSPACES = 40
TICKS = 50


def replica(env: dict[str, str], start: str, barrier: Barrier, results: multiprocessing.Queue[int]) -> None:
    from app.factory import create_app
    from app.lifecycle.executor import run_tick

    app = create_app(load_settings(env))
    first = datetime.fromisoformat(start)
    acted = 0
    for minute in range(TICKS):
        barrier.wait(timeout=120)  # both replicas tick the same minute at the same moment
        with app.app_context():
            acted += run_tick(first + timedelta(minutes=minute, seconds=1)).acted
            db.session.remove()
    results.put(acted)


def environment(settings: Settings) -> dict[str, str]:
    return {
        "SLIPWAY_DATA_DIR": str(settings.data_dir),
        "SLIPWAY_DATABASE_URL": settings.database_url,
        "SLIPWAY_REDIS_URL": settings.redis_url,
        "SLIPWAY_SECRET_KEY": settings.secret_key,
    }


def test_two_replicas_act_once_per_minute_and_build_each_due_workspace_once(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], settings: Settings
) -> None:
    template = import_template(client, personas, FakeDaemon(client))
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(days=1)
    with app.app_context():
        owner = db.session.get(User, personas["carol"].id)
        assert owner is not None
        for number in range(WORKSPACES):
            workspace = services.create_workspace(owner, template["id"], f"w{number}", {"region": "eu"})
            build = services.latest_build(workspace)
            # Its first start succeeded; its autostop comes one minute after the previous one's.
            build.job.started_at = build.job.completed_at = datetime.now(UTC)
            build.deadline = start + timedelta(minutes=number)
        db.session.commit()
        db.session.remove()

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [
        context.Process(target=replica, args=(environment(settings), start.isoformat(), barrier, results))
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    acted = [results.get(timeout=300) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0

    assert sum(acted) == TICKS, acted
    with app.app_context():
        per_workspace = db.session.execute(
            select(
                WorkspaceBuild.workspace_id,
                func.count(),
                func.sum(case((WorkspaceBuild.reason == "autostop", 1), else_=0)),
            ).group_by(WorkspaceBuild.workspace_id)
        ).all()
        db.session.remove()
    assert len(per_workspace) == WORKSPACES
    assert all(count == 2 and autostops == 1 for _, count, autostops in per_workspace), per_workspace
