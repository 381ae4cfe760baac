"""The lifecycle executor's rules, driven by an injected clock on both databases: what is due gets one build with
its reason, what is not (busy, deleted, dormant, suspended owner, missed by an hour) gets none, and a tick that
another replica already took does nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.extensions import db
from app.lifecycle.executor import TickReport, run_tick
from app.notifications.models import Notification
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.users.models import STATUS_SUSPENDED, User
from app.workspaces.models import Workspace, WorkspaceBuild
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")

HOUR = timedelta(hours=1)


class World:
    def __init__(self, app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
        self.app, self.client, self.personas = app, client, personas
        self.daemon = FakeDaemon(client)
        self.template = import_template(client, personas, self.daemon)
        self.clock = datetime.now(UTC).replace(second=0, microsecond=0)

    def finish(self, build: dict[str, Any], *, fail: bool = False) -> None:
        job_id = build["job"]["id"]
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        if fail:
            reply = self.daemon.call(f"/jobs/{job_id}/fail", {"error": "boom"})
        else:
            reply = self.daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}})
        assert reply.status_code == 204, reply.json

    def create(self, name: str = "ws", *, fail: bool = False) -> str:
        body = {
            "template_id": self.template["id"],
            "name": name,
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        }
        reply = self.client.post("/api/v2/workspaces", json=body, headers=self.personas["carol"].auth)
        assert reply.status_code == 201, reply.json
        self.finish(reply.json["latest_build"], fail=fail)
        return str(reply.json["id"])

    def build(self, workspace_id: str, transition: str) -> dict[str, Any]:
        reply = self.client.post(
            f"/api/v2/workspaces/{workspace_id}/builds",
            json={"transition": transition},
            headers=self.personas["carol"].auth,
        )
        assert reply.status_code == 201, reply.json
        return dict(reply.json)

    def tick(self, at: datetime) -> TickReport:
        with self.app.app_context():
            try:
                return run_tick(at)
            finally:
                db.session.remove()

    def update(self, model: type[Any], row_id: str, **values: Any) -> None:
        with self.app.app_context():
            row = db.session.get(model, row_id)
            for name, value in values.items():
                setattr(row, name, value)
            db.session.commit()
            db.session.remove()

    def set_template(self, **values: Any) -> None:
        from app.catalog.models import Template

        self.update(Template, self.template["id"], **values)

    def latest(self, workspace_id: str) -> dict[str, Any]:
        return dict(self.client.get(f"/api/v2/workspaces/{workspace_id}", headers=self.personas["carol"].auth).json)

    def builds(self, workspace_id: str) -> list[dict[str, Any]]:
        reply = self.client.get(f"/api/v2/workspaces/{workspace_id}/builds", headers=self.personas["carol"].auth)
        return list(reply.json)

    def events(self) -> list[str]:
        with self.app.app_context():
            found = [row.event for row in db.session.scalars(select(Notification).order_by(Notification.created_at))]
            db.session.remove()
        return found


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> World:
    return World(app, client, personas)


def test_a_running_workspace_is_stopped_at_its_deadline_once(world: World) -> None:
    world.set_template(default_ttl_ms=2 * 3_600_000)
    workspace_id = world.create()
    deadline = world.latest(workspace_id)["latest_build"]["deadline"]
    assert deadline is not None
    due = datetime.fromisoformat(deadline)
    assert world.tick(due - timedelta(minutes=1)).queued == []
    report = world.tick(due + timedelta(minutes=1))
    assert report.queued == [(workspace_id, "autostop")]
    latest = world.latest(workspace_id)["latest_build"]
    assert (latest["transition"], latest["reason"]) == ("stop", "autostop")
    # The stop is still pending: the next tick must not queue another build.
    assert world.tick(due + timedelta(minutes=2)).queued == []
    assert "workspace_autostopped" in world.events()


def test_a_stopped_workspace_starts_on_schedule_and_a_missed_start_is_caught_up_once(world: World) -> None:
    workspace_id = world.create()
    world.finish(world.build(workspace_id, "stop"))
    due = world.clock + HOUR
    world.update(Workspace, workspace_id, autostart_schedule="CRON_TZ=UTC 0 9 * * *", next_start_at=due)
    # The server was down at the scheduled minute: the first tick 20 minutes late acts, once.
    report = world.tick(due + timedelta(minutes=20))
    assert report.queued == [(workspace_id, "autostart")]
    with world.app.app_context():
        workspace = db.session.get(Workspace, workspace_id)
        assert workspace is not None and workspace.next_start_at is not None
        assert workspace.next_start_at > due + timedelta(minutes=20)
        db.session.remove()
    world.finish(world.latest(workspace_id)["latest_build"])
    assert world.tick(due + timedelta(minutes=21)).queued == []
    assert [build["reason"] for build in world.builds(workspace_id)][:2] == ["autostart", "initiator"]


def test_an_autostart_missed_by_more_than_an_hour_is_skipped_and_said(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    workspace_id = world.create()
    world.finish(world.build(workspace_id, "stop"))
    due = world.clock
    world.update(Workspace, workspace_id, autostart_schedule="CRON_TZ=UTC 0 9 * * *", next_start_at=due)
    report = world.tick(due + 2 * HOUR)
    assert report.queued == []
    assert "missed by more than" in caplog.text
    assert world.latest(workspace_id)["latest_build"]["transition"] == "stop"


def test_no_autostart_for_a_suspended_owner_a_forbidding_template_or_a_running_workspace(world: World) -> None:
    running = world.create("running")
    suspended = world.create("suspended")
    world.finish(world.build(suspended, "stop"))
    due = world.clock
    for workspace_id in (running, suspended):
        world.update(Workspace, workspace_id, autostart_schedule="CRON_TZ=UTC 0 9 * * *", next_start_at=due)
    world.update(User, world.personas["carol"].id, status=STATUS_SUSPENDED)
    assert world.tick(due + timedelta(minutes=1)).queued == []
    world.update(User, world.personas["carol"].id, status="active")
    world.set_template(allow_user_autostart=False)
    world.update(Workspace, suspended, next_start_at=due + timedelta(minutes=2))
    assert world.tick(due + timedelta(minutes=3)).queued == []


def test_no_autostart_once_the_owner_may_no_longer_use_the_template(world: World) -> None:
    workspace_id = world.create()
    world.finish(world.build(workspace_id, "stop"))
    due = world.clock
    world.update(Workspace, workspace_id, autostart_schedule="CRON_TZ=UTC 0 9 * * *", next_start_at=due)
    # Everyone loses the template (its access list emptied by its admin): carol's schedule starts nothing.
    emptied = world.client.patch(
        f"/api/v2/templates/{world.template['id']}/acl",
        json={"group_perms": {DEFAULT_ORGANIZATION_ID: ""}},
        headers=world.personas["bob"].auth,
    )
    assert emptied.status_code in (200, 204), emptied.json
    report = world.tick(due + timedelta(minutes=1))
    assert report.queued == []
    assert report.skipped == [(workspace_id, "autostart skipped: the owner may no longer use template dev")]
    assert world.latest(workspace_id)["latest_build"]["transition"] == "stop"


def test_a_failed_start_is_cleaned_up_after_the_failure_ttl_and_never_again(world: World) -> None:
    world.set_template(failure_ttl_ms=10 * 60_000)
    workspace_id = world.create(fail=True)
    now = datetime.now(UTC)
    assert world.tick(now + timedelta(minutes=5)).queued == []
    assert world.tick(now + timedelta(minutes=11)).queued == [(workspace_id, "failure_cleanup")]
    world.finish(world.latest(workspace_id)["latest_build"], fail=True)
    # The cleanup stop failed too: a failed stop is reported, not retried in a loop.
    assert world.tick(now + timedelta(minutes=30)).queued == []
    assert [build["reason"] for build in world.builds(workspace_id)] == ["failure_cleanup", "initiator"]
    # Each failure was told to the owner: the person's start, then the automatic cleanup.
    assert world.events().count("build_failed") == 2
    with world.app.app_context():
        titles = [
            row.title for row in db.session.scalars(select(Notification).where(Notification.event == "build_failed"))
        ]
        db.session.remove()
    assert sorted(titles) == ["Start of ws failed", "Stop of ws failed (failure cleanup)"]


def test_an_unused_workspace_goes_dormant_is_stopped_then_deleted(world: World) -> None:
    world.set_template(time_til_dormant_ms=7 * 24 * 3_600_000, time_til_dormant_autodelete_ms=3 * 24 * 3_600_000)
    workspace_id = world.create()
    used = datetime.now(UTC)
    world.update(Workspace, workspace_id, last_used_at=used)
    # A day before: a warning, once.
    world.tick(used + timedelta(days=6, hours=1))
    world.tick(used + timedelta(days=6, hours=2))
    assert world.events().count("workspace_dormancy_warning") == 1
    report = world.tick(used + timedelta(days=7, minutes=1))
    assert report.queued == [(workspace_id, "dormancy")]
    workspace = world.latest(workspace_id)
    assert workspace["dormant_at"] is not None and workspace["deleting_at"] is not None
    world.finish(workspace["latest_build"])
    # Dormant: a person cannot start it until it is activated.
    refused = world.client.post(
        f"/api/v2/workspaces/{workspace_id}/builds", json={"transition": "start"}, headers=world.personas["carol"].auth
    )
    assert refused.status_code == 400 and "dormant" in refused.json["message"]
    deleting_at = datetime.fromisoformat(workspace["deleting_at"])
    world.tick(deleting_at - timedelta(hours=23))
    assert "workspace_deletion_warning" in world.events()
    assert world.tick(deleting_at + timedelta(minutes=1)).queued == [(workspace_id, "autodelete")]
    assert world.latest(workspace_id)["latest_build"]["transition"] == "delete"


def test_a_tick_another_replica_took_does_nothing(world: World) -> None:
    world.set_template(default_ttl_ms=3_600_000)
    workspace_id = world.create()
    deadline = datetime.fromisoformat(world.latest(workspace_id)["latest_build"]["deadline"])
    due = deadline.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=5)
    assert world.tick(due).acted
    # Same minute again (the other replica, or this one twice): nothing, though the Redis lock is free.
    again = world.tick(due + timedelta(seconds=50))
    assert not again.acted
    with world.app.app_context():
        builds = db.session.scalars(select(WorkspaceBuild).where(WorkspaceBuild.workspace_id == workspace_id)).all()
        assert len(builds) == 2
        db.session.remove()
