"""What admins see of provisioning: daemons, jobs with queue places, the Provisioners page, metrics, the reaper."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.provisioning.maintenance import forget_daemons, reap_jobs
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template, push_version
from tests.support.web import first_event, sign_in, stream_url

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _jobs(client: FlaskClient, persona: Persona, query: str = "") -> list[dict[str, Any]]:
    reply = client.get(f"/api/v2/provisionerjobs{query}", headers=persona.auth)
    assert reply.status_code == 200, reply.json
    return list(reply.json)


def _age(app: Flask, daemon_id: str, seconds: int) -> None:
    with app.app_context():
        daemon = db.session.get(ProvisionerDaemon, daemon_id)
        assert daemon is not None
        daemon.last_seen_at = utcnow() - timedelta(seconds=seconds)
        db.session.commit()


def test_a_job_no_daemon_can_take_says_so(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob = personas["bob"]
    FakeDaemon(client, "plain")
    version = client.post(
        "/api/v2/templateversions",
        json={"file_id": _file(client, bob), "provisioner_tags": {"gpu": "a100"}},
        headers=bob.auth,
    ).json  # fmt: skip
    job = version["job"]
    assert (job["queue_position"], job["queue_size"], job["available_workers"]) == (0, 0, 0)

    sign_in(client, bob.email, PASSWORD)
    page = client.get(f"/templates/versions/{version['id']}").get_data(as_text=True)
    assert "No provisioner matches tags gpu=a100" in page
    assert "slipway provisionerd start --tag gpu=a100" in page
    notice = client.get(f"/jobs/{job['id']}/queue").get_data(as_text=True)
    assert "No provisioner matches tags gpu=a100" in notice and "every 3s" in notice

    FakeDaemon(client, "gpu-box", {"gpu": "a100"})
    notice = client.get(f"/jobs/{job['id']}/queue").get_data(as_text=True)
    assert "Queued, position 1 of 1 · 1 matching provisioner." in notice


def _file(client: FlaskClient, admin: Persona) -> str:
    from tests.support.archives import tar_of

    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
    upload = client.post("/api/v2/files", data=archive, headers={**admin.auth, "Content-Type": "application/x-tar"})
    return str(upload.json["id"])


def test_queue_positions_follow_the_matching_daemons(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob = personas["bob"]
    daemon = FakeDaemon(client)
    first, second, third = (push_version(client, bob)["job"] for _ in range(3))
    assert daemon.call(f"/jobs/{first['id']}/acquire").status_code == 200
    listed = {job["id"]: job for job in _jobs(client, bob)}
    assert listed[first["id"]]["status"] == "running" and listed[first["id"]]["worker_name"] == "d1"
    assert (listed[second["id"]]["queue_position"], listed[second["id"]]["queue_size"]) == (1, 2)
    assert (listed[third["id"]]["queue_position"], listed[third["id"]]["queue_size"]) == (2, 2)
    assert all(job["available_workers"] == 1 for job in listed.values())
    assert listed[second["id"]]["metadata"]["title"].startswith("Import new template")

    pending = _jobs(client, bob, "?status=pending")
    assert [job["id"] for job in pending] == [third["id"], second["id"]]  # newest first
    assert len(_jobs(client, bob, "?status=pending,running")) == 3
    bad = client.get("/api/v2/provisionerjobs?status=stuck", headers=bob.auth)
    assert bad.status_code == 400 and "pending" in bad.json["message"]
    assert client.get("/api/v2/provisionerjobs?limit=x", headers=bob.auth).status_code == 400
    pages = [_jobs(client, bob, f"?limit=2&offset={offset}") for offset in (0, 2)]
    assert [job["id"] for page in pages for job in page] == [third["id"], second["id"], first["id"]]
    assert client.get("/api/v2/provisionerjobs?offset=-1", headers=bob.auth).status_code == 400


def test_daemon_status_idle_busy_offline(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob = personas["bob"]
    busy, idle, gone = FakeDaemon(client, "busy"), FakeDaemon(client, "idle"), FakeDaemon(client, "gone")
    job = push_version(client, bob)["job"]
    assert busy.call(f"/jobs/{job['id']}/acquire").status_code == 200
    _age(app, gone.id, 91)
    daemons = {d["name"]: d for d in client.get("/api/v2/provisionerdaemons", headers=bob.auth).json}
    assert {name: d["status"] for name, d in daemons.items()} == {"busy": "busy", "idle": "idle", "gone": "offline"}
    assert daemons["busy"]["current_job"]["id"] == job["id"] and daemons["busy"]["key_name"] == "psk"
    assert busy.call(f"/jobs/{job['id']}/complete", {"template_import": {}}).status_code == 204
    daemons = {d["name"]: d for d in client.get("/api/v2/provisionerdaemons", headers=bob.auth).json}
    assert daemons["busy"]["status"] == "idle" and daemons["busy"]["previous_job"]["status"] == "succeeded"
    offline = client.get("/api/v2/provisionerdaemons?status=offline", headers=bob.auth).json
    assert [d["name"] for d in offline] == ["gone"]
    # Each status is chosen by the database, so that a page of one status is cut after the filter.
    second = push_version(client, bob)["job"]
    assert idle.call(f"/jobs/{second['id']}/acquire").status_code == 200
    for status, expected in (("busy", ["idle"]), ("idle", ["busy"]), ("offline", ["gone"])):
        listed = client.get(f"/api/v2/provisionerdaemons?status={status}&limit=1", headers=bob.auth)
        assert [d["name"] for d in listed.json] == expected and listed.headers["X-Total-Count"] == "1", status
    assert client.get("/api/v2/provisionerdaemons?status=lost", headers=bob.auth).status_code == 400
    assert idle.call("/heartbeat").status_code == 200


def test_a_week_silent_daemon_is_forgotten_and_its_jobs_kept(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    gone, recent = FakeDaemon(client, "gone"), FakeDaemon(client, "recent")
    job = push_version(client, bob)["job"]
    assert gone.call(f"/jobs/{job['id']}/acquire").status_code == 200
    assert gone.call(f"/jobs/{job['id']}/complete", {"template_import": {}}).status_code == 204
    _age(app, gone.id, 7 * 86400 + 1)
    _age(app, recent.id, 6 * 86400)
    with app.app_context():
        assert forget_daemons() == 1
    names = [d["name"] for d in client.get("/api/v2/provisionerdaemons", headers=bob.auth).json]
    assert names == ["recent"]
    kept = client.get(f"/api/v2/provisionerjobs/{job['id']}", headers=bob.auth).json
    assert kept["status"] == "succeeded" and kept["worker_name"] == ""


def test_builds_of_a_user_scoped_template_go_to_the_workspace_owner(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, carol = personas["bob"], personas["carol"]
    version = client.post(
        "/api/v2/templateversions",
        json={"file_id": _file(client, bob), "provisioner_tags": {"scope": "user", "gpu": "yes"}},
        headers=bob.auth,
    ).json
    bobs = FakeDaemon(client, "bobs", {"scope": "user", "gpu": "yes"}, credential=bob.auth)
    assert bobs.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200
    assert bobs.call(f"/jobs/{version['job']['id']}/complete", {"template_import": {}}).status_code == 204
    template = client.post("/api/v2/templates", json={"name": "mine", "version_id": version["id"]}, headers=bob.auth)
    created = client.post(
        "/api/v2/workspaces", json={"template_id": template.json["id"], "name": "ws"}, headers=carol.auth
    ).json
    build_job = created["latest_build"]["job"]
    assert build_job["tags"] == {"scope": "user", "owner": carol.id, "gpu": "yes"}
    assert bobs.call(f"/jobs/{build_job['id']}/acquire").status_code == 403  # bob's daemon: not his build
    carols = FakeDaemon(client, "carols", {"scope": "user", "gpu": "yes"}, credential=carol.auth)
    assert carols.call(f"/jobs/{build_job['id']}/acquire").status_code == 200


def test_members_cancel_their_own_builds_only(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    carol, dave = personas["carol"], personas["dave"]
    created = client.post(
        "/api/v2/workspaces",
        json={
            "template_id": template["id"],
            "name": "ws",
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        },
        headers=carol.auth,
    ).json
    job_id = created["latest_build"]["job"]["id"]
    assert client.get(f"/api/v2/provisionerjobs/{job_id}", headers=dave.auth).status_code == 404
    assert client.patch(f"/api/v2/provisionerjobs/{job_id}/cancel", headers=dave.auth).status_code == 404
    assert client.get("/api/v2/provisionerjobs", headers=carol.auth).status_code == 403
    canceled = client.patch(f"/api/v2/provisionerjobs/{job_id}/cancel", headers=carol.auth)
    assert canceled.status_code == 200 and canceled.json["status"] == "canceled"
    again = client.patch(f"/api/v2/provisionerjobs/{job_id}/cancel", headers=carol.auth)
    assert again.status_code == 400 and "already canceled" in again.json["message"]


def test_the_provisioners_page(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob = personas["bob"]
    daemon = FakeDaemon(client, "builder-7", {"env": "prod"})
    running, waiting = push_version(client, bob)["job"], push_version(client, bob)["job"]
    assert daemon.call(f"/jobs/{running['id']}/acquire").status_code == 200
    sign_in(client, bob.email, PASSWORD)
    page = client.get("/provisioners").get_data(as_text=True)
    assert "builder-7" in page and "env=prod" in page and "daemon-busy" in page
    assert f'data-job="{waiting["id"]}"' in page and "position 1 of 1" in page
    assert 'sse-connect="/provisioners/events?seen=refresh-' in page

    created = client.post(
        "/provisioners/keys", data={"name": "eu-pool", "tags": "region=eu", "csrf_token": _csrf(client)}
    )
    body = created.get_data(as_text=True)
    assert created.status_code == 200 and 'id="new-key"' in body and "region=eu" in body
    bad = client.post("/provisioners/keys", data={"name": "x", "tags": "nonsense", "csrf_token": _csrf(client)})
    assert bad.status_code == 400 and "key=value" in bad.get_data(as_text=True)
    no_csrf = client.post("/provisioners/keys", data={"name": "y"})
    assert no_csrf.status_code == 400
    gone = client.post("/provisioners/keys/eu-pool/delete", data={"csrf_token": _csrf(client)})
    assert gone.status_code == 302
    after = client.get("/provisioners").get_data(as_text=True)
    assert "Deleted provisioner key eu-pool" in after and "No provisioner keys yet" in after

    cancel = client.post(f"/provisioners/jobs/{waiting['id']}/cancel", data={"csrf_token": _csrf(client)})
    assert cancel.status_code == 302
    assert _jobs(client, bob, "?status=canceled")[0]["id"] == waiting["id"]


def test_a_job_queued_between_the_page_and_its_stream_refreshes_the_page_at_once(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """The stream's first read can come after a change the page did not show: it must not wait for another."""
    bob = personas["bob"]
    sign_in(client, bob.email, PASSWORD)
    provisioners_stream = stream_url(client.get("/provisioners").get_data(as_text=True))
    push_version(client, bob)  # queued after the page rendered, before its stream connected
    received = first_event(client, provisioners_stream)
    assert received.startswith(b": connected") and b"event: refresh\ndata: changed" in received


def _csrf(client: FlaskClient) -> str:
    from tests.support.web import csrf_token

    return csrf_token(client, "/provisioners")


def test_metrics_need_an_admin_token(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, carol = personas["bob"], personas["carol"]
    daemon = FakeDaemon(client)
    job = push_version(client, bob)["job"]
    push_version(client, bob)
    assert daemon.call(f"/jobs/{job['id']}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{job['id']}/complete", {"template_import": {}}).status_code == 204
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=carol.auth).status_code == 403
    text = client.get("/metrics", headers=bob.auth).get_data(as_text=True)
    assert 'slipway_provisioner_jobs{status="succeeded",type="template_version_import"} 1.0' in text
    assert 'slipway_provisioner_jobs{status="pending",type="template_version_import"} 1.0' in text
    assert (
        'slipway_provisioner_job_duration_seconds_count{result="succeeded",type="template_version_import"} 1.0' in text
    )
    assert 'slipway_provisioner_daemons{status="idle"} 1.0' in text
    assert 'slipway_provisioner_queue_depth{queue="slipway:jobs:owner=&scope=organization"} 1.0' in text


def test_the_reaper_ends_hung_stuck_and_stale_jobs(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], settings: Settings
) -> None:
    bob = personas["bob"]
    daemon = FakeDaemon(client)
    versions = [push_version(client, bob) for _ in range(4)]
    hung, stuck, stale, fresh = (version["job"] for version in versions)
    for job in (hung, stuck):
        assert daemon.call(f"/jobs/{job['id']}/acquire").status_code == 200
    assert client.patch(f"/api/v2/provisionerjobs/{stuck['id']}/cancel", headers=bob.auth).json["status"] == "canceling"
    now = utcnow()
    with app.app_context():
        for job_id, column, age in (
            (hung["id"], "updated_at", settings.provisioner_hang_timeout + 1),
            (stuck["id"], "canceled_at", settings.provisioner_force_cancel_interval + 61),
            # Pending since updated_at: its creation, or the confirmation of its plan.
            (stale["id"], "updated_at", settings.provisioner_pending_timeout + 1),
        ):
            row = db.session.get(ProvisionerJob, job_id)
            assert row is not None
            setattr(row, column, now - timedelta(seconds=age))
        db.session.commit()
        assert reap_jobs(settings) == 3
        assert reap_jobs(settings) == 0
    statuses = {job["id"]: job for job in _jobs(client, bob)}
    assert "hung" in statuses[hung["id"]]["error"] and statuses[hung["id"]]["status"] == "failed"
    assert "Cancel timed out" in statuses[stuck["id"]]["error"]
    assert "No provisioner daemon took this job" in statuses[stale["id"]]["error"]
    assert statuses[fresh["id"]]["status"] == "pending"
    notice = client.get(f"/api/v2/templateversions/{versions[0]['id']}/logs", headers=bob.auth).json
    assert [line["level"] for line in notice] == ["error"] * 5 and "hung" in notice[2]["output"]


def test_which_daemons_would_take_jobs_with_given_tags(client: FlaskClient, personas: dict[str, Persona]) -> None:
    """API.md's ?tags= filter, and the upload form's answer as tags are typed, before anything is queued."""
    bob, carol = personas["bob"], personas["carol"]
    FakeDaemon(client, "plain")
    FakeDaemon(client, "prod-eu", {"env": "prod", "region": "eu"})
    FakeDaemon(client, "carols", {"scope": "user"}, credential=carol.auth)

    def serving(tags: str, persona: Persona = bob) -> list[str]:
        reply = client.get("/api/v2/provisionerdaemons", query_string={"tags": tags}, headers=persona.auth)
        assert reply.status_code == 200, reply.json
        return sorted(daemon["name"] for daemon in reply.json)

    assert serving('{"env": "prod"}') == ["prod-eu"]
    assert serving('{"env": "prod", "region": "us"}') == []
    assert serving("{}") == ["plain", "prod-eu"]  # untagged organisation jobs: any organisation daemon
    assert serving('{"scope": "user"}') == []  # bob's own jobs: carol's daemon never takes them
    for bad in ("not json", '["env"]', '{"env": 1}'):
        refused = client.get("/api/v2/provisionerdaemons", query_string={"tags": bad}, headers=bob.auth)
        assert refused.status_code == 400 and refused.json["validations"][0]["field"] == "tags"
    assert client.get("/api/v2/provisionerdaemons?tags={}", headers=carol.auth).status_code == 403

    sign_in(client, bob.email, PASSWORD)
    page = client.get("/templates")
    assert 'id="routing-check"' in page.text and "/templates/routing-check" in page.text
    found = client.get("/templates/routing-check", query_string={"tags": "env=prod"}).text
    assert "1 online provisioner</span> would take its jobs" in found
    missing = client.get("/templates/routing-check", query_string={"tags": "gpu=a100"}).text
    assert "No online provisioner" in missing and "slipway provisionerd start --tag gpu=a100" in missing
    assert "field-error" in client.get("/templates/routing-check", query_string={"tags": "nonsense"}).text
    member = client.application.test_client()
    sign_in(member, carol.email, PASSWORD)
    assert member.get("/templates/routing-check?tags=env=prod").status_code == 403
