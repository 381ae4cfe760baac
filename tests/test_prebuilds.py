"""Prebuilt workspaces, in-process: the ``prebuilds`` system user (issue 42 part 1)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.agents.handover import Handover, token_handover
from app.catalog.models import TemplateVersion
from app.catalog.presets import preset_id
from app.core.extensions import db
from app.prebuilds.reconciler import ReconcileReport, run_tick
from app.provisioning.models import ProvisionerJob
from app.resources.models import WorkspaceAgent
from app.users.models import PREBUILDS_USER_ID, PREBUILDS_USERNAME
from app.workspaces.models import Workspace, WorkspaceBuild
from protocol.provisionerd import PrebuildScheduling
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
    assert _pool_findings(client, personas) == []  # filling is no finding
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
    # The health report names the pool that stays short, and why.
    (finding,) = _pool_findings(client, personas)
    assert finding.startswith("Template dev, preset Europe: 1 of 2 prebuilt workspaces running; 1 failed build(s)")
    assert "the last: quota exceeded at the cloud; next try after " in finding
    later = _tick(app, now=pool.backoff_until + timedelta(seconds=1))
    assert [(a.kind, a.preset_name) for a in later.queued] == [("create", "Europe")]


def _pool_findings(client: FlaskClient, personas: dict[str, Persona]) -> list[str]:
    report = client.get("/api/v2/debug/health?force=true", headers=personas["alice"].auth).get_json()
    section = report["prebuilds"]
    assert section["severity"] == ("warning" if section["warnings"] else "ok")
    return [w["message"] for w in section["warnings"] if w["code"] == "prebuild_pool_short"]


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
    assert _pool_findings(client, personas) == [
        "Template dev, preset Europe: 0 of 2 prebuilt workspaces running; reconciliation is paused "
        "(slipway prebuilds resume)."
    ]
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


def _complete_pending(app: Flask, daemon: FakeDaemon) -> None:
    for job_id, _, status in _prebuild_jobs(app):
        if status == "pending":
            assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
            assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204


def _date_prebuilds(app: Flask, created_at: datetime, *, known: set[str]) -> set[str]:
    """Date the prebuilds made since ``known`` on the test's clock (they carry the real clock's)."""
    with app.app_context():
        everyone = select(Workspace.id).where(Workspace.owner_id == PREBUILDS_USER_ID, Workspace.deleted.is_(False))
        rows = set(db.session.scalars(everyone)) - known
        db.session.execute(update(Workspace).where(Workspace.id.in_(rows)).values(created_at=created_at))
        db.session.commit()
    return rows


@pytest.mark.databases("sqlite", "postgresql")
def test_expired_prebuilds_are_replaced_a_new_one_first_and_a_schedule_sets_the_count(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    scheduling = {"timezone": "Europe/Berlin", "schedules": [{"cron": "* 8-18 * * 1-5", "instances": 2}]}
    preset = {
        **EUROPE,
        "desired_prebuild_instances": 1,
        "prebuild_ttl_seconds": 86400,
        "prebuild_scheduling": scheduling,
    }
    import_template(client, personas, daemon, presets=[preset])
    with app.app_context():
        (version,) = db.session.scalars(select(TemplateVersion))
        assert version.presets[0].prebuild_scheduling == PrebuildScheduling.from_json(scheduling)
    # Sunday 08:00 in Berlin: no schedule matches, the base count (1).
    sunday = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
    assert [a.kind for a in _tick(app, now=sunday).queued] == ["create"]
    _complete_pending(app, daemon)
    (first,) = _date_prebuilds(app, sunday, known=set())
    # Monday 09:00 in Berlin: the schedule's 2, and the Sunday one has expired (25 h old). Two fresh ones first; the
    # expired one stays, the only one ready.
    monday = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    filling = _tick(app, now=monday)
    assert [(a.kind, a.why) for a in filling.queued] == [("create", "pool Europe has 0 of 2")] * 2
    assert (filling.plan.pools[0].desired, filling.plan.pools[0].expired) == (2, 1)
    _complete_pending(app, daemon)
    _date_prebuilds(app, monday, known={first})
    # Both ready: now the expired one goes.
    replaced = _tick(app, now=monday + timedelta(minutes=5))
    assert [(a.kind, a.workspace_id) for a in replaced.queued] == [("delete", first)]
    # Monday 20:00 in Berlin: the base again; the surplus goes.
    evening = _tick(app, now=datetime(2026, 11, 30, 19, 0, tzinfo=UTC))
    assert [a.kind for a in evening.queued] == ["delete"] and evening.plan.pools[0].desired == 1


@pytest.mark.databases("sqlite", "postgresql")
def test_prebuilds_are_listed_only_by_owner_prebuilds_and_only_to_owners_and_template_admins(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    template = import_template(client, personas, FakeDaemon(client), presets=[EUROPE])
    alice, bob, carol = (personas[name] for name in ("alice", "bob", "carol"))
    # carol administers this template (its access list), which shows her its people's workspaces, not its pool.
    acl = {"user_perms": {carol.id: "admin"}}
    assert client.patch(f"/api/v2/templates/{template['id']}/acl", json=acl, headers=alice.auth).status_code == 200
    _create(client, carol, template, "carols")  # no prebuild ready yet: built for her
    assert len(_tick(app).queued) == 2

    def names(persona: Persona, q: str) -> list[str]:
        reply = client.get("/api/v2/workspaces", query_string={"q": q}, headers=persona.auth)
        assert reply.status_code == 200, reply.get_json()
        return sorted(w["owner_name"] for w in reply.get_json())

    for persona in (alice, bob, carol):
        for q in ("", "template:dev", "name:prebuild", "owner:carol"):
            assert PREBUILDS_USERNAME not in names(persona, q), (persona.username, q)
    for persona in (alice, bob):
        assert names(persona, "owner:prebuilds") == [PREBUILDS_USERNAME] * 2
        assert names(persona, "owner:Prebuilds template:dev status:pending") == [PREBUILDS_USERNAME] * 2
    assert names(carol, "owner:prebuilds") == []
    # The dashboard's list and its search read the same rule; so does the template's "update all" page.
    pool = [w["name"] for w in client.get("/api/v2/workspaces?q=owner:prebuilds", headers=alice.auth).get_json()]
    for persona, listed in ((alice, True), (bob, True), (carol, False)):
        browser = app.test_client()
        sign_in(browser, persona.email, PASSWORD)
        assert not any(name in browser.get("/workspaces").get_data(as_text=True) for name in pool)
        searched = browser.get("/workspaces?q=owner:prebuilds").get_data(as_text=True)
        assert all((name in searched) == listed for name in pool), persona.username
        update_all = browser.get(f"/templates/{template['name']}/update-all").get_data(as_text=True)
        assert not any(name in update_all for name in pool)


def test_the_template_page_and_status_show_expired_prebuilds(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    import_template(client, personas, daemon, presets=[{**EUROPE, "prebuild_ttl_seconds": 3600}])
    assert len(_tick(app).queued) == 2
    _complete_pending(app, daemon)
    with app.app_context():  # one of them was made two hours ago (on the real clock, which the page reads)
        oldest = db.session.scalars(select(Workspace).where(Workspace.owner_id == PREBUILDS_USER_ID)).first()
        assert oldest is not None
        oldest.created_at -= timedelta(hours=2)
        db.session.commit()
    bob = personas["bob"]
    (pool,) = client.get("/api/v2/prebuilds/status", headers=bob.auth).get_json()["pools"]
    assert (pool["desired"], pool["ready"], pool["expired"]) == (2, 2, 1)
    admin = app.test_client()
    sign_in(admin, bob.email, PASSWORD)
    assert '<td>2 <span class="muted small">(1 expired, being replaced)</span></td>' in admin.get(
        "/templates/dev"
    ).get_data(as_text=True)


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
