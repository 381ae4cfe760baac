"""Prebuilt workspaces, in-process: the ``prebuilds`` system user (issue 42 part 1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.extensions import db
from app.prebuilds.reconciler import ReconcileReport, run_tick
from app.provisioning.models import ProvisionerJob
from app.users.models import PREBUILDS_USER_ID, PREBUILDS_USERNAME
from app.workspaces.models import Workspace, WorkspaceBuild
from protocol.tags import PRIORITY_LOW
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template

pytestmark = pytest.mark.databases("sqlite")


def test_the_prebuilds_user_is_nobody_to_sign_in_as_or_to_list(client: FlaskClient) -> None:
    # An empty deployment (but for the system user) still asks for its first person, who becomes the owner.
    assert client.get("/api/v2/users/first").status_code == 404
    first = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
    assert client.post("/api/v2/users/first", json=first).status_code == 201
    token = client.post("/api/v2/users/login", json={"email": first["email"], "password": PASSWORD}).get_json()
    alice = {"Coder-Session-Token": token["session_token"]}
    for identifier in (PREBUILDS_USERNAME, "prebuilds@system.slipway.invalid"):
        refused = client.post("/api/v2/users/login", json={"email": identifier, "password": ""})
        assert refused.status_code in (400, 401)
    listed = client.get("/api/v2/users", headers=alice).get_json()
    assert [user["username"] for user in listed] == ["alice"]
    # Still there for whoever names it (GET /api/v2/workspaces?q=owner:prebuilds resolves it).
    assert client.get(f"/api/v2/users/{PREBUILDS_USER_ID}", headers=alice).get_json()["username"] == PREBUILDS_USERNAME


def test_members_do_not_see_the_prebuilds_user(client: FlaskClient, personas: dict[str, Persona]) -> None:
    listed = client.get("/api/v2/users?limit=100", headers=personas["carol"].auth)
    if listed.status_code == 200:
        assert PREBUILDS_USERNAME not in [user["username"] for user in listed.get_json()]
    else:
        assert listed.status_code == 403


EUROPE = {
    "name": "Europe",
    "parameters": [{"name": "region", "value": "eu"}, {"name": "size", "value": "4"}],
    "desired_prebuild_instances": 2,
}


def _tick(app: Flask, **options: Any) -> ReconcileReport:
    with app.app_context():
        return run_tick(**options)


def _prebuild_jobs(app: Flask) -> list[tuple[str, str, str]]:
    with app.app_context():
        rows = db.session.execute(
            select(ProvisionerJob.id, ProvisionerJob.priority, ProvisionerJob.status)
            .join(WorkspaceBuild, WorkspaceBuild.job_id == ProvisionerJob.id)
            .join(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
            .where(Workspace.owner_id == PREBUILDS_USER_ID)
            .order_by(ProvisionerJob.created_at)
        )
        return [(job_id, priority, status) for job_id, priority, status in rows]


@pytest.mark.databases("sqlite", "postgresql")
def test_the_reconciler_fills_a_pool_at_low_priority_and_backs_off_on_failure(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon, presets=[EUROPE, {"name": "America", "parameters": []}])
    first = _tick(app)
    assert [(a.kind, a.preset_name) for a in first.queued] == [("create", "Europe"), ("create", "Europe")]
    jobs = _prebuild_jobs(app)
    assert [(priority, status) for _, priority, status in jobs] == [(PRIORITY_LOW, "pending")] * 2
    assert _tick(app).queued == []  # building: the pool is full
    # Owners see them by owner, members never.
    alice, carol = personas["alice"].auth, personas["carol"].auth
    seen = client.get("/api/v2/workspaces?q=owner:prebuilds", headers=alice).get_json()
    assert len(seen) == 2 and {w["template_id"] for w in seen} == {template["id"]}
    assert all(w["owner_name"] == PREBUILDS_USERNAME for w in seen)
    assert client.get("/api/v2/workspaces?q=owner:prebuilds", headers=carol).get_json() == []
    # One succeeds (no agents: ready once built), the other fails: it is replaced only after the backoff.
    ok, bad = (job_id for job_id, _, _ in jobs)
    for job_id in (ok, bad):
        assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{ok}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    assert daemon.call(f"/jobs/{bad}/fail", {"error": "quota exceeded at the cloud"}).status_code == 204
    after = _tick(app)
    assert [(a.kind, a.why) for a in after.queued] == [("delete", "its latest build failed")]
    (pool,) = [p for p in after.plan.pools if p.preset_name == "Europe"]
    assert (pool.desired, pool.ready, pool.failures) == (2, 1, 1)
    assert "quota exceeded at the cloud" in pool.failure_reason and pool.backoff_until is not None
    later = _tick(app, now=pool.backoff_until + timedelta(seconds=1))
    assert [(a.kind, a.preset_name) for a in later.queued] == [("create", "Europe")]
