"""Activity is written in batches: many marks, one UPDATE per flush and at most one flush a minute; open
connections push a running workspace's autostop out (never past max_deadline), app requests do not."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.core.redis_client import get_redis
from app.lifecycle.activity import USED_KEY, flush_activity, mark_requested, mark_used
from app.workspaces.models import WorkspaceBuild
from tests.conftest import Persona
from tests.support.queries import counted
from tests.test_lifecycle_executor import World

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> World:
    return World(app, client, personas)


def flush(app: Flask) -> int:
    with app.app_context():
        try:
            return flush_activity(app.config["SLIPWAY_SETTINGS"])
        finally:
            db.session.remove()


def mark(app: Flask, workspace_id: str, *, connection: bool) -> None:
    with app.app_context():
        mark_used(workspace_id, connection=connection)


def deadline_of(scene: World, workspace_id: str) -> datetime:
    return datetime.fromisoformat(scene.latest(workspace_id)["latest_build"]["deadline"])


def test_marks_are_flushed_in_one_update_and_connections_bump_the_deadline(world: World) -> None:
    world.set_template(default_ttl_ms=3_600_000, activity_bump_ms=3 * 3_600_000)
    connected, app_only = world.create("ssh"), world.create("web")
    before: dict[str, Any] = {key: world.latest(key) for key in (connected, app_only)}
    for _ in range(5):
        mark(world.app, connected, connection=True)
        mark(world.app, app_only, connection=False)
    with counted(world.app) as statements:
        assert flush(world.app) == 2
    updates = [statement for statement in statements if statement.lstrip().upper().startswith("UPDATE WORKSPACES ")]
    assert len(updates) == 1, updates
    for key in (connected, app_only):
        assert world.latest(key)["last_used_at"] > before[key]["last_used_at"]
    now = datetime.now(UTC)
    assert now + timedelta(hours=2, minutes=58) < deadline_of(world, connected) <= now + timedelta(hours=3)
    assert deadline_of(world, app_only) == datetime.fromisoformat(before[app_only]["latest_build"]["deadline"])
    # Within the flush interval nothing more is written, whatever was marked.
    mark(world.app, connected, connection=True)
    assert flush(world.app) == 0


def test_a_bump_never_passes_max_deadline_nor_shortens_a_later_deadline(world: World) -> None:
    world.set_template(default_ttl_ms=3_600_000, activity_bump_ms=3 * 3_600_000)
    capped, far = world.create("capped"), world.create("far")
    limit = datetime.now(UTC) + timedelta(hours=2)
    later = datetime.now(UTC) + timedelta(hours=10)
    with world.app.app_context():
        for workspace_id, values in ((capped, {"max_deadline": limit}), (far, {"deadline": later})):
            build = db.session.scalars(
                db.select(WorkspaceBuild).where(WorkspaceBuild.workspace_id == workspace_id)
            ).one()
            for name, value in values.items():
                setattr(build, name, value)
        db.session.commit()
        db.session.remove()
    mark(world.app, capped, connection=True)
    mark(world.app, far, connection=True)
    flush(world.app)
    assert deadline_of(world, capped) == limit
    assert deadline_of(world, far) == later


def test_an_app_s_requests_mark_their_workspace_once_per_interval(app: Flask) -> None:
    """A busy app costs one Redis write per workspace every few seconds, not one per request."""
    workspace_id = str(uuid.uuid4())
    with app.app_context():
        client = get_redis()
        mark_requested(workspace_id)
        assert client.hexists(USED_KEY, workspace_id)
        client.hdel(USED_KEY, workspace_id)
        mark_requested(workspace_id)  # within the interval: not written again
        assert not client.hexists(USED_KEY, workspace_id)
        mark_requested(other := str(uuid.uuid4()))  # each workspace has its own interval
        assert client.hexists(USED_KEY, other)
