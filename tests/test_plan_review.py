"""A build held for confirmation, on both databases, driven by a stand-in daemon: what it tells the daemon, who
may confirm or cancel it, that no daemon and no reaper touches it while it waits, and the plan it hands back."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.columns import utcnow
from app.core.extensions import db
from app.provisioning.maintenance import reap_jobs
from app.provisioning.models import ProvisionerJob
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")

PLAN_FILE = b"PK\x03\x04 a saved plan"
REVIEW = {
    "destroys": [{"address": "terraform_data.home", "persistent": True, "replace": True, "reasons": ["input"]}],
    "creates": ["terraform_data.dev[0]"],
    "plan": base64.b64encode(PLAN_FILE).decode(),
}


class Held:
    def __init__(self, app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
        self.app, self.client, self.personas = app, client, personas
        self.daemon = FakeDaemon(client)
        template = import_template(client, personas, self.daemon)
        carol = personas["carol"].auth
        body = {
            "template_id": template["id"],
            "name": "ws",
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        }
        created = client.post("/api/v2/workspaces", json=body, headers=carol)
        assert created.status_code == 201, created.json
        self.workspace_id = created.json["id"]
        self.finish(created.json["latest_build"]["job"]["id"], {"workspace_build": {"resources": []}})
        started = client.post(f"/api/v2/workspaces/{self.workspace_id}/builds", json={"transition": "start"},
                              headers=carol)  # fmt: skip
        assert started.status_code == 201, started.json
        self.build, self.job_id = started.json, started.json["job"]["id"]
        acquired = self.daemon.call(f"/jobs/{self.job_id}/acquire")
        assert acquired.status_code == 200, acquired.json
        self.payload = acquired.json["workspace_build"]
        done = self.daemon.call(f"/jobs/{self.job_id}/complete", {"workspace_build": {"review": REVIEW}})
        assert done.status_code == 204, done.json

    def finish(self, job_id: str, completion: dict[str, Any]) -> None:
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        assert self.daemon.call(f"/jobs/{job_id}/complete", completion).status_code == 204

    def get(self, who: str) -> Any:
        return self.client.get(f"/api/v2/workspacebuilds/{self.build['id']}", headers=self.personas[who].auth)

    def post(self, who: str, action: str) -> Any:
        return self.client.post(f"/api/v2/workspacebuilds/{self.build['id']}/{action}", headers=self.personas[who].auth)


@pytest.fixture
def held(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> Held:
    return Held(app, client, personas)


def test_the_daemon_is_told_what_to_protect_and_the_build_waits(held: Held) -> None:
    assert held.payload["protect_persistent"] is True
    assert held.payload["persistent_resources"] == ["terraform_data.home"]  # the import's persistent resource
    assert held.payload["confirmed_plan"] == ""
    build = held.get("carol").json
    assert build["status"] == "awaiting_confirmation" and build["job"]["status"] == "awaiting_confirmation"
    assert build["job"]["worker_id"] is None
    plan = held.client.get(f"/api/v2/workspacebuilds/{held.build['id']}/plan", headers=held.personas["carol"].auth)
    assert plan.json["destroys"] == REVIEW["destroys"] and "plan" not in plan.json
    # No daemon is offered it, and no reaper ends it, however long the person takes.
    assert held.daemon.call("/jobs/wait", {"timeout_seconds": 0}).status_code == 204
    with held.app.app_context():
        job = db.session.get(ProvisionerJob, held.job_id)
        assert job is not None
        job.updated_at = utcnow() - timedelta(days=2)
        db.session.commit()
        assert reap_jobs(held.app.config["SLIPWAY_SETTINGS"]) == 0
        db.session.remove()
    assert held.get("carol").json["job"]["status"] == "awaiting_confirmation"


def test_only_the_owner_or_a_deployment_owner_confirms_and_the_confirmed_plan_goes_back(held: Held) -> None:
    assert held.post("dave", "confirm").status_code == 404  # another member cannot even see it
    refused = held.post("bob", "confirm")  # a template admin sees it, but it is not theirs to confirm
    assert refused.status_code == 403 and "owner" in refused.json["message"]
    assert held.get("carol").json["job"]["status"] == "awaiting_confirmation"
    confirmed = held.post("carol", "confirm")
    assert confirmed.status_code == 200 and confirmed.json["job"]["status"] == "pending", confirmed.json
    assert held.post("alice", "confirm").status_code == 400  # nothing waits any more
    acquired = held.daemon.call(f"/jobs/{held.job_id}/acquire")
    assert acquired.status_code == 200
    assert base64.b64decode(acquired.json["workspace_build"]["confirmed_plan"]) == PLAN_FILE


def test_a_cancel_ends_a_waiting_build_at_once(held: Held) -> None:
    canceled = held.client.patch(
        f"/api/v2/workspacebuilds/{held.build['id']}/cancel", headers=held.personas["alice"].auth
    )
    assert canceled.status_code == 200 and canceled.json["job"]["status"] == "canceled", canceled.json
    assert held.post("carol", "confirm").status_code == 400
    # The workspace is free for its next build.
    again = held.client.post(f"/api/v2/workspaces/{held.workspace_id}/builds", json={"transition": "stop"},
                             headers=held.personas["carol"].auth)  # fmt: skip
    assert again.status_code == 201, again.json
