"""Prebuilt workspaces, in-process: the ``prebuilds`` system user (issue 42 part 1)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.agents.handover import Handover, token_handover
from app.catalog.presets import preset_id
from app.core.extensions import db
from app.prebuilds.reconciler import ReconcileReport, run_tick
from app.provisioning.models import ProvisionerJob
from app.resources.models import WorkspaceAgent
from app.users.models import PREBUILDS_USER_ID, PREBUILDS_USERNAME
from app.workspaces.models import Workspace, WorkspaceBuild
from protocol.tags import PRIORITY_LOW
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import post_form, sign_in

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
    "parameters": [{"name": "region", "value": "eu"}],  # size: its default (1), unless a person chooses
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


def _ready_pool(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> tuple[FakeDaemon, dict[str, Any]]:
    """A template whose Europe preset has 2 prebuilds, both built (no agents: ready once built)."""
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon, presets=[EUROPE])
    assert len(_tick(app).queued) == 2
    for job_id, _, _ in _prebuild_jobs(app):
        assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    return daemon, template


def _create(client: FlaskClient, persona: Persona, template: dict[str, Any], name: str, **extra: Any) -> Any:
    body = {
        "template_id": template["id"],
        "name": name,
        "template_version_preset_id": preset_id(template["active_version_id"], "Europe"),
        **extra,
    }
    reply = client.post("/api/v2/workspaces", json=body, headers=persona.auth)
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()


@pytest.mark.databases("sqlite", "postgresql")
def test_a_create_with_the_preset_claims_a_ready_prebuild_and_the_pool_refills(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _, template = _ready_pool(app, client, personas)
    with app.app_context():
        pool = set(db.session.scalars(select(Workspace.id).where(Workspace.owner_id == PREBUILDS_USER_ID)))
    carol = personas["carol"]
    mine = _create(client, carol, template, "mine")
    assert mine["id"] in pool and mine["owner_name"] == "carol" and mine["name"] == "mine"
    # A start build with carol as its initiator and owner, queued at once (people's priority).
    build = mine["latest_build"]
    assert (build["build_number"], build["transition"]) == (2, "start")
    with app.app_context():
        job = db.session.get_one(ProvisionerJob, build["job"]["id"])
        assert (job.priority, job.initiator_id, job.status) == ("high", carol.id, "pending")
    # The claim is in the audit log: the owner and name it changed, by carol.
    entries = client.get("/api/v2/audit?q=resource_type:workspace", headers=personas["alice"].auth).get_json()
    claim = next(e for e in entries["audit_logs"] if e["resource_id"] == mine["id"] and "owner_id" in e["diff"])
    assert claim["diff"]["owner_id"]["new"] == carol.id and claim["user"]["username"] == "carol"
    # Other values beyond the preset's: not this prebuild (a normal build, no error).
    other = _create(client, carol, template, "other", rich_parameter_values=[{"name": "size", "value": "5"}])
    assert other["id"] not in pool and other["latest_build"]["build_number"] == 1
    # The pool refills: one left, one created.
    refill = _tick(app)
    assert [(a.kind, a.preset_name) for a in refill.queued] == [("create", "Europe")]
    metrics = client.get("/metrics", headers=personas["alice"].auth).get_data(as_text=True)
    labels = '{preset_name="Europe",template_name="dev"}'
    for line in ("created_total", "claimed_total"):
        assert f"slipway_prebuilt_workspaces_{line}{labels} " in metrics
    assert f"slipway_prebuilt_workspaces_created_total{labels} 3.0" in metrics
    assert f"slipway_prebuilt_workspaces_claimed_total{labels} 1.0" in metrics
    assert f"slipway_prebuilt_workspaces_desired{labels} 2.0" in metrics
    assert f"slipway_prebuilt_workspaces_eligible{labels} 1.0" in metrics


@pytest.mark.databases("sqlite", "postgresql")
def test_concurrent_claims_never_take_the_same_prebuild(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _, template = _ready_pool(app, client, personas)
    with app.app_context():
        pool = set(db.session.scalars(select(Workspace.id).where(Workspace.owner_id == PREBUILDS_USER_ID)))
    people = [personas[name] for name in ("alice", "bob", "carol", "dave")]
    start = threading.Barrier(len(people))
    results: dict[str, Any] = {}

    def create(persona: Persona) -> None:
        own = app.test_client()
        start.wait(timeout=30)
        results[persona.username] = _create(own, persona, template, f"race-{persona.username}")

    threads = [threading.Thread(target=create, args=(persona,)) for persona in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == len(people)
    claimed = [w["id"] for w in results.values() if w["id"] in pool]
    assert sorted(claimed) == sorted(pool)  # both prebuilds claimed, each once
    assert len({w["id"] for w in results.values()}) == len(people)  # the others built their own


def test_pausing_stops_reconciliation_and_status_shows_the_pools(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    import_template(client, personas, FakeDaemon(client), presets=[EUROPE])
    bob, carol = personas["bob"].auth, personas["carol"].auth
    assert client.get("/api/v2/prebuilds/settings", headers=bob).get_json() == {"reconciliation_paused": False}
    bad = client.put("/api/v2/prebuilds/settings", json={"reconciliation_paused": "yes"}, headers=bob)
    assert bad.status_code == 400 and bad.get_json()["validations"][0]["field"] == "reconciliation_paused"
    assert (
        client.put("/api/v2/prebuilds/settings", json={"reconciliation_paused": True}, headers=carol).status_code == 403
    )
    paused = client.put("/api/v2/prebuilds/settings", json={"reconciliation_paused": True}, headers=bob)
    assert paused.get_json() == {"reconciliation_paused": True}
    assert _tick(app).queued == [] and _prebuild_jobs(app) == []
    status = client.get("/api/v2/prebuilds/status", headers=bob).get_json()
    assert status["reconciliation_paused"] is True
    assert [(p["preset_name"], p["desired"], p["running"]) for p in status["pools"]] == [("Europe", 2, 0)]
    client.put("/api/v2/prebuilds/settings", json={"reconciliation_paused": False}, headers=bob)
    assert len(_tick(app).queued) == 2


def test_the_template_page_shows_its_pools_to_its_admins_only(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template = import_template(client, personas, FakeDaemon(client), presets=[EUROPE])
    page = f"/templates/{template['name']}"
    member = app.test_client()
    sign_in(member, personas["carol"].email, PASSWORD)
    assert "template-prebuilds" not in member.get(page).get_data(as_text=True)
    admin = app.test_client()
    sign_in(admin, personas["bob"].email, PASSWORD)
    html = admin.get(page).get_data(as_text=True)
    assert 'id="template-prebuilds"' in html and '<tr data-preset="Europe">' in html
    assert "<td>Europe</td><td>2</td><td>0</td><td>0</td><td>0</td>" in html
    paused = post_form(
        admin, "/deployment/prebuilds/settings", {"reconciliation_paused": "true", "next": page}, token_from=page
    )
    assert paused.status_code == 302 and paused.headers["Location"] == page
    assert "Reconciliation is paused" in admin.get(page).get_data(as_text=True)
    assert _tick(app).queued == []


def _agent_resources(token: str) -> list[dict[str, Any]]:
    agent = {"name": "main", "id": f"tf-{token}", "os": "linux", "arch": "amd64", "token": token}
    return [{"name": "dev", "type": "terraform_data", "agents": [agent]}]


UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


def _agent_get(client: FlaskClient, path: str, token: str) -> int:
    headers = {"Slipway-Agent-Token": token, **(UPGRADE if path == "rpc" else {})}
    status: int = client.get(f"/api/v2/workspaceagents/me/{path}", headers=headers).status_code
    return status


@pytest.mark.databases("sqlite", "postgresql")
def test_a_claimed_prebuilds_agent_gets_a_new_token_and_its_old_one_only_reaches_the_handover(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon, presets=[EUROPE])
    _tick(app)
    for number, (job_id, _, _) in enumerate(_prebuild_jobs(app)):
        assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        built = daemon.call(
            f"/jobs/{job_id}/complete", {"workspace_build": {"resources": _agent_resources(f"old{number}")}}
        )
        assert built.status_code == 204
        ready = {"state": "ready"}
        reported = client.post(
            "/api/v2/workspaceagents/me/lifecycle", json=ready, headers={"Slipway-Agent-Token": f"old{number}"}
        )
        assert reported.status_code == 204
    mine = _create(client, personas["carol"], template, "mine")
    (old,) = [token for token in ("old0", "old1") if _agent_get(client, "manifest", token) == 401]
    # The claim's build sets the running agent's token in place: the new one, by the agent's Terraform id.
    acquired = daemon.call(f"/jobs/{mine['latest_build']['job']['id']}/acquire").get_json()
    tokens = acquired["workspace_build"]["running_agent_tokens"]
    assert list(tokens) == [f"tf-{old}"] and tokens[f"tf-{old}"] not in ("", old)
    new = tokens[f"tf-{old}"]
    # Nothing of anyone's to protect in a prebuild: no plan to review first, one Terraform run sooner.
    assert acquired["workspace_build"]["protect_persistent"] is False
    # The old token is refused, but for the control connection that will carry the new one (past the token check,
    # the test client has no socket to take over: 400).
    assert _agent_get(client, "rpc", old) == 400
    assert _agent_get(client, "rpc", "someone-else") == 401
    with app.app_context():
        (old_agent,) = [a for a in db.session.scalars(select(WorkspaceAgent)) if a.pending_token == new]
        assert token_handover(old_agent.id) == Handover(waiting=True)  # the claim's build runs
    finished = daemon.call(
        f"/jobs/{mine['latest_build']['job']['id']}/complete",
        {
            "workspace_build": {
                "resources": [
                    {
                        **_agent_resources(new)[0],
                        "agents": [{**_agent_resources(new)[0]["agents"][0], "id": f"tf-{old}"}],
                    }
                ]
            }
        },
    )
    assert finished.status_code == 204
    with app.app_context():
        assert token_handover(old_agent.id) == Handover(waiting=False, token=new)
        assert token_handover(old_agent.id) == Handover(waiting=False)  # handed over once, then gone
    assert _agent_get(client, "rpc", old) == 401
    assert _agent_get(client, "manifest", new) == 200
