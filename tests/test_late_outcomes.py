"""A daemon reports a build's outcome after the server has ended the job (it was cut off, the reaper failed the
job; or it restarted): the Terraform state it left is recorded once, and the build's log says what happened."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.provisioning.daemons import fail_jobs_held_by
from app.workspaces.models import WorkspaceBuild
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, held_first_build, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")

STATE = b'{"version": 4, "serial": 7, "resources": [{"type": "terraform_data", "name": "home"}]}'


def _reaped_build(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> tuple[FakeDaemon, dict[str, Any]]:
    daemon = FakeDaemon(client)
    workspace = held_first_build(client, personas, daemon, import_template(client, personas, daemon))
    with app.app_context():  # what the reaper does to a job it has not heard about
        fail_jobs_held_by(daemon.id, "The provisioner daemon stopped reporting (hung).")
    return daemon, workspace


def _state_of(app: Flask, build_id: str) -> bytes | None:
    with app.app_context():
        build = db.session.get(WorkspaceBuild, build_id)
        assert build is not None
        return build.state


def _log(client: FlaskClient, personas: dict[str, Persona], build_id: str) -> list[str]:
    reply = client.get(f"/api/v2/workspacebuilds/{build_id}/logs", headers=personas["carol"].auth)
    return [line["output"] for line in reply.json]


def test_a_late_completion_records_the_state_once(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon, workspace = _reaped_build(app, client, personas)
    build_id, job_id = workspace["latest_build"]["id"], workspace["latest_build"]["job"]["id"]
    outcome = {"workspace_build": {"state": base64.b64encode(STATE).decode(), "resources": []}}
    for _ in range(2):  # the first reply was lost: the daemon reports again
        assert daemon.call(f"/jobs/{job_id}/complete", outcome).status_code == 204
    assert _state_of(app, build_id) == STATE
    told = [line for line in _log(client, personas, build_id) if "state it left is recorded" in line]
    assert len(told) == 1
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["status"] == "failed" and "hung" in job["error"]  # what happened stays on record
    # The next build starts from the state Terraform really left.
    stop = client.post(
        f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=personas["carol"].auth
    )
    assert stop.status_code == 201, stop.json
    acquired = daemon.call(f"/jobs/{stop.json['job']['id']}/acquire").json
    assert base64.b64decode(acquired["workspace_build"]["state"]) == STATE


def test_a_late_failure_after_a_newer_build_leaves_the_newer_state_alone(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon, workspace = _reaped_build(app, client, personas)
    build_id, job_id = workspace["latest_build"]["id"], workspace["latest_build"]["job"]["id"]
    newer = client.post(
        f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "start"}, headers=personas["carol"].auth
    )
    assert newer.status_code == 201, newer.json
    failure = {"error": "apply failed", "state": base64.b64encode(STATE).decode()}
    assert daemon.call(f"/jobs/{job_id}/fail", failure).status_code == 204
    assert _state_of(app, build_id) != STATE
    assert any("a newer build has run since" in line for line in _log(client, personas, build_id))


def test_another_daemon_cannot_report_for_an_ended_job(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _, workspace = _reaped_build(app, client, personas)
    stranger = FakeDaemon(client, "stranger")
    outcome = {"workspace_build": {"state": base64.b64encode(STATE).decode()}}
    reply = stranger.call(f"/jobs/{workspace['latest_build']['job']['id']}/complete", outcome)
    assert reply.status_code == 403
    assert _state_of(app, workspace["latest_build"]["id"]) != STATE
