"""Build timings stored from the daemon's outcome and the agent's script reports, read back in Coder's shape, and
drawn as the build page's waterfall; on SQLite and PostgreSQL (the stand-in daemon completes the builds)."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.agents import services as agent_services
from app.core.extensions import db
from app.provisioning.models import ProvisionerJob, ProvisionerJobTiming
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.timings.services import JobTimings
from app.timings.waterfall import waterfall
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template, push_version
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

TOKEN = "0c6e0a29-8d6c-4b8e-9d0b-8f0f3c3c1a11"
AGENT = {"name": "main", "os": "linux", "arch": "amd64", "token": TOKEN,
         "scripts": [{"display_name": "Install tools", "script": "true", "run_on_start": True}]}  # fmt: skip
RESOURCES = [{"name": "dev", "type": "terraform_data", "agents": [AGENT]}]
T0 = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)


def stamp(seconds: float, origin: datetime = T0) -> str:
    return (origin + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def bar(
    stage: str, start: float, end: float, resource: str = "", action: str = "create", origin: datetime = T0
) -> dict[str, str]:
    source = "terraform" if not resource else resource.split("_")[0]
    return {"stage": stage, "started_at": stamp(start, origin), "ended_at": stamp(end, origin), "source": source,
            "action": action, "resource": resource}  # fmt: skip


def bars(origin: datetime = T0) -> list[dict[str, str]]:
    """init 0-2, plan 2-3, apply 3-10: the image (3-7) then the container (7-10) on the critical path, a volume
    aside."""
    return [
        bar("init", 0, 2, action="initializing terraform", origin=origin),
        bar("plan", 2, 3, action="terraform apply", origin=origin),
        bar("apply", 3, 10, action="terraform apply", origin=origin),
        bar("apply", 3, 7, "docker_image.main", origin=origin),
        bar("apply", 3, 4, "docker_volume.home", origin=origin),
        bar("apply", 7, 10, "docker_container.workspace", origin=origin),
    ]


BARS = bars()


class Build:
    """carol's workspace, its template imported by bob; its first build acquired by the stand-in daemon."""

    def __init__(self, client: FlaskClient, personas: dict[str, Persona]) -> None:
        self.client, self.personas = client, personas
        self.daemon = FakeDaemon(client)
        template = import_template(client, personas, self.daemon)
        body = {
            "template_id": template["id"],
            "name": "w1",
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        }
        created = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
        assert created.status_code == 201, created.json
        self.id, self.job_id = created.json["latest_build"]["id"], created.json["latest_build"]["job"]["id"]
        assert self.daemon.call(f"/jobs/{self.job_id}/acquire").status_code == 200

    def complete(self, timings: list[dict[str, str]] | None) -> None:
        outcome: dict[str, Any] = {
            "workspace_build": {"state": base64.b64encode(b"{}").decode(), "resources": RESOURCES}
        }
        if timings is not None:  # None: a daemon from before timings, which sends no such field
            outcome["timings"] = timings
        reply = self.daemon.call(f"/jobs/{self.job_id}/complete", outcome)
        assert reply.status_code == 204, reply.json

    def timings(self, persona: str = "carol") -> Any:
        return self.client.get(f"/api/v2/workspacebuilds/{self.id}/timings", headers=self.personas[persona].auth)


def test_a_builds_timings_come_back_in_coders_shape_in_start_order(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    build = Build(client, personas)
    build.complete(list(reversed(BARS)))

    reply = build.timings()

    assert reply.status_code == 200, reply.json
    timings = reply.json["provisioner_timings"]
    assert [(t["stage"], t["resource"]) for t in timings[:3]] == [("init", ""), ("plan", ""), ("apply", "")]
    container = next(t for t in timings if t["resource"] == "docker_container.workspace")
    assert container == {"job_id": build.job_id, "started_at": stamp(7), "ended_at": stamp(10), "stage": "apply",
                         "source": "docker", "action": "create", "resource": "docker_container.workspace"}  # fmt: skip
    assert len(timings) == len(BARS)
    assert reply.json["agent_script_timings"] == [] and reply.json["agent_connection_timings"] == []
    job = reply.json["job"]
    assert job["id"] == build.job_id and job["status"] == "succeeded"
    assert job["queued_at"] <= job["started_at"] <= job["completed_at"]


def test_bars_that_do_not_parse_are_dropped_and_the_build_still_completes(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    build = Build(client, personas)
    backwards = bar("apply", 5, 4, "docker_image.main")
    zoneless = {**bar("plan", 1, 2), "started_at": "2026-11-27T10:00:00"}
    build.complete([bar("init", 0, 1), backwards, zoneless, {**bar("plan", 1, 2), "ended_at": "soon"}])

    assert [t["stage"] for t in build.timings().json["provisioner_timings"]] == ["init"]


def test_a_daemon_from_before_timings_completes_with_none(client: FlaskClient, personas: dict[str, Persona]) -> None:
    build = Build(client, personas)
    build.complete(None)

    assert build.timings().json["provisioner_timings"] == []


def test_a_failed_build_keeps_the_timings_up_to_its_failure(client: FlaskClient, personas: dict[str, Persona]) -> None:
    build = Build(client, personas)
    failure = {"error": "apply failed", "timings": [bar("init", 0, 1), bar("apply", 1, 3, "docker_image.main")]}
    assert build.daemon.call(f"/jobs/{build.job_id}/fail", failure).status_code == 204

    timings = build.timings().json["provisioner_timings"]
    assert [t["resource"] for t in timings] == ["", "docker_image.main"]
    assert build.timings().json["job"]["status"] == "failed"


def test_a_message_over_its_limits_is_refused_whole(client: FlaskClient, personas: dict[str, Persona]) -> None:
    build = Build(client, personas)
    too_long = {**bar("apply", 0, 1), "resource": "x" * 513}
    outcome = {"workspace_build": {"state": "", "resources": []}, "timings": [too_long]}

    reply = build.daemon.call(f"/jobs/{build.job_id}/complete", outcome)

    assert reply.status_code == 400
    assert "timings[0].resource" in reply.json["validations"][0]["field"]


def test_timings_are_read_as_the_build_is(client: FlaskClient, personas: dict[str, Persona]) -> None:
    build = Build(client, personas)
    build.complete(BARS)

    assert build.timings("alice").status_code == 200  # an owner reads every build
    assert build.timings("dave").status_code == 404  # another member does not see carol's workspace at all
    assert client.get(f"/api/v2/workspacebuilds/{build.id}/timings").status_code == 401
    missing = client.get("/api/v2/workspacebuilds/00000000-0000-0000-0000-000000000000/timings",
                         headers=personas["carol"].auth)  # fmt: skip
    assert missing.status_code == 404


def test_a_template_imports_timings_are_for_template_admins(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon = FakeDaemon(client)
    version = push_version(client, personas["bob"])
    assert daemon.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200
    imported = {"template_import": {}, "timings": [bar("init", 0, 1), bar("plan", 1, 2), bar("graph", 2, 2.5)]}
    assert daemon.call(f"/jobs/{version['job']['id']}/complete", imported).status_code == 204
    path = f"/api/v2/templateversions/{version['id']}/timings"

    reply = client.get(path, headers=personas["bob"].auth)

    assert [t["stage"] for t in reply.json["provisioner_timings"]] == ["init", "plan", "graph"]
    assert reply.json["agent_script_timings"] == []
    # As the import's log: an upload of no template yet is its uploader's and template admins' alone.
    assert client.get(path, headers=personas["carol"].auth).status_code == 404
    admin, member = client.application.test_client(), client.application.test_client()
    sign_in(admin, personas["bob"].email, PASSWORD)
    sign_in(member, personas["carol"].email, PASSWORD)
    page = admin.get(f"/templates/versions/{version['id']}").get_data(as_text=True)
    assert f"Waterfall of the import of {version['name']}" in page
    assert admin.get(f"/jobs/{version['job']['id']}/timings").status_code == 200
    assert member.get(f"/jobs/{version['job']['id']}/timings").status_code == 404  # as its page: not members'


def _script_source(client: FlaskClient) -> str:
    manifest = client.get("/api/v2/workspaceagents/me/manifest", headers={"Slipway-Agent-Token": TOKEN}).json
    return str(manifest["scripts"][0]["log_source_id"])


def test_the_agents_connection_and_scripts_join_the_builds_timings(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    build = Build(client, personas)
    build.complete(BARS)
    source = _script_source(client)
    with app.app_context():
        agent_services.mark_connected(_agent_id(app, build.job_id), "c0ffee00-0000-0000-0000-000000000000")
    script = {"log_source_id": source, "stage": "start", "started_at": stamp(20), "ended_at": stamp(23.5),
              "exit_code": 1, "status": "exit_failure"}  # fmt: skip

    reply = client.post(
        "/api/v2/workspaceagents/me/script-timings", json=script, headers={"Slipway-Agent-Token": TOKEN}
    )

    assert reply.status_code == 204, reply.json
    timings = build.timings().json
    (run,) = timings["agent_script_timings"]
    assert run["display_name"] == "Install tools" and run["workspace_agent_name"] == "main"
    assert (run["exit_code"], run["status"], run["stage"]) == (1, "exit_failure", "start")
    assert (run["started_at"], run["ended_at"]) == (stamp(20), stamp(23.5))
    (connected,) = timings["agent_connection_timings"]
    assert connected["stage"] == "connect" and connected["workspace_agent_name"] == "main"
    assert connected["started_at"] <= connected["ended_at"]


def _agent_id(app: Flask, job_id: str) -> str:
    with app.app_context():
        query = select(WorkspaceAgent).join(WorkspaceResource).where(WorkspaceResource.job_id == job_id)
        return db.session.scalars(query).one().id


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"log_source_id": "00000000-0000-0000-0000-000000000000"}, "is not a script of this agent"),
        ({"ended_at": stamp(0)}, "the end not before the start"),
        ({"started_at": "yesterday"}, "RFC 3339"),
    ],
)
def test_a_script_timing_that_makes_no_sense_is_a_clear_400(
    client: FlaskClient, personas: dict[str, Persona], change: dict[str, str], problem: str
) -> None:
    Build(client, personas).complete(BARS)
    script = {"log_source_id": _script_source(client), "started_at": stamp(1), "ended_at": stamp(2), **change}

    reply = client.post(
        "/api/v2/workspaceagents/me/script-timings", json=script, headers={"Slipway-Agent-Token": TOKEN}
    )

    assert reply.status_code == 400
    assert problem in reply.json["message"]


def test_the_build_page_draws_the_waterfall_with_its_critical_path(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    build = Build(client, personas)
    browser = client.application.test_client()
    sign_in(browser, personas["carol"].email, PASSWORD)
    running = browser.get(f"/builds/{build.id}").get_data(as_text=True)
    assert "The timings appear here when the job ends" in running
    assert f'hx-get="/jobs/{build.job_id}/timings" hx-trigger="sse:end"' in running
    job = client.get(f"/api/v2/workspacebuilds/{build.id}", headers=personas["carol"].auth).json["job"]
    build.complete(bars(datetime.fromisoformat(job["started_at"])))  # as a daemon would: after it took the job

    page = browser.get(f"/jobs/{build.job_id}/timings").get_data(as_text=True)

    assert re.search(r'<svg class="waterfall" role="img" aria-labelledby="waterfall-title waterfall-desc"', page)
    rows = re.findall(
        r'<g class="waterfall-row row-\w+( is-critical)?[^"]*">.*?class="waterfall-label"[^>]*>([^<]*)<', page, re.S
    )
    critical = [label for mark, label in rows if mark]
    assert critical == ["Queued", "Init", "Plan", "Apply", "docker_image.main", "docker_container.workspace"]
    assert "docker_volume.home" in page and "style=" not in page
    assert "Slowest resource: <code>docker_image.main</code> 4.0 s" in page
    assert browser.get(f"/builds/{build.id}").status_code == 200
    other = client.application.test_client()
    sign_in(other, personas["dave"].email, PASSWORD)
    assert other.get(f"/jobs/{build.job_id}/timings").status_code == 404
    assert "Waterfall of build #1" in browser.get(f"/builds/{build.id}").get_data(as_text=True)


def timing_row(stage: str, start: float, end: float, resource: str = "") -> ProvisionerJobTiming:
    started_at, ended_at = T0 + timedelta(seconds=start), T0 + timedelta(seconds=end)
    return ProvisionerJobTiming(
        stage=stage, source="", action="create", resource=resource, started_at=started_at, ended_at=ended_at
    )


def test_the_critical_path_follows_the_chain_that_ended_last() -> None:
    job = ProvisionerJob(id="j", created_at=T0, started_at=T0 + timedelta(seconds=1))
    # b waits on a; c runs beside them and ends before b: the total waited on a then b, not on c.
    timings = [timing_row("init", 1, 2), timing_row("apply", 2, 9), timing_row("apply", 2, 4, "a"),
               timing_row("apply", 4.1, 9, "b"), timing_row("apply", 2, 8, "c")]  # fmt: skip

    chart = waterfall(JobTimings(job, timings, [], []))

    assert [(r.label, r.critical) for r in chart.rows] == [
        ("Queued", True), ("Init", True), ("Apply", True), ("a", True), ("b", True), ("c", False),
    ]  # fmt: skip
    assert chart.total == "9.0 s" and chart.rows[0].left == 0
    b = chart.rows[4]
    assert round(b.left, 1) == round(100 * 4.1 / 9, 1) and round(b.left + b.width) == 100
    assert chart.slowest is not None and chart.slowest.label == "c"


def test_a_stage_of_instant_reads_is_on_the_path_but_its_reads_are_not() -> None:
    job = ProvisionerJob(id="j", created_at=T0, started_at=T0)
    # Planning took 3 s, almost all of it Terraform's own (providers starting); its data reads took milliseconds.
    timings = [timing_row("plan", 0, 3), timing_row("plan", 2.9, 2.905, "data.a"),
               timing_row("plan", 2.905, 2.91, "data.b"), timing_row("apply", 3, 4)]  # fmt: skip

    chart = waterfall(JobTimings(job, timings, [], []))

    assert [(r.label, r.critical) for r in chart.rows] == [
        ("Queued", False), ("Plan", True), ("data.a", False), ("data.b", False), ("Apply", True),
    ]  # fmt: skip
    assert chart.slowest is None  # "slowest: data.a 0.0 s" would tell nobody anything
