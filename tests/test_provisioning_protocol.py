"""The server's side of provisioning, driven over HTTP exactly as a daemon drives it (no Terraform here)."""

from __future__ import annotations

import base64

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.archives import tar_of
from tests.support.daemon import PSK, RESOURCES, FakeDaemon, import_template, push_version

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def test_import_then_workspace_lifecycle(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    bob, carol = personas["bob"], personas["carol"]
    version_id = template["active_version_id"]
    resources = client.get(f"/api/v2/templateversions/{version_id}/resources", headers=carol.auth).json
    assert {(r["name"], r["kind"], r["lifecycle"]) for r in resources} == {
        ("home", "peripheral", "persistent"), ("dev", "computational", "ephemeral"),
    }  # fmt: skip
    variables = client.get(f"/api/v2/templateversions/{version_id}/variables", headers=bob.auth).json
    assert variables[0]["sensitive"] is True and variables[0]["default_value"] == ""
    logs = client.get(f"/api/v2/templateversions/{version_id}/logs", headers=bob.auth).json
    assert [line["output"] for line in logs] == ["hello"]

    missing = client.post("/api/v2/workspaces", json={"template_id": template["id"], "name": "ws1"}, headers=carol.auth)
    assert missing.status_code == 400 and missing.json["validations"] == [
        {"field": "region", "detail": "A value is required."}
    ]
    bad = client.post(
        "/api/v2/workspaces",
        json={
            "template_id": template["id"],
            "name": "ws1",
            "rich_parameter_values": [{"name": "region", "value": "mars"}, {"name": "size", "value": "9"}],
        },
        headers=carol.auth,
    )
    assert {v["field"] for v in bad.json["validations"]} == {"region", "size"}
    created = client.post(
        "/api/v2/workspaces",
        json={
            "template_id": template["id"],
            "name": "ws1",
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        },
        headers=carol.auth,
    )
    assert created.status_code == 201, created.json
    workspace = created.json
    assert workspace["status"] == "pending" and workspace["latest_build"]["job"]["queue_position"] == 1
    build = workspace["latest_build"]
    assert (
        client.post(
            f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=carol.auth
        ).status_code
        == 409
    )

    payload = daemon.call(f"/jobs/{build['job']['id']}/acquire").json["workspace_build"]
    assert payload["transition"] == "start" and payload["parameters"] == [
        {"name": "size", "value": "1"},
        {"name": "region", "value": "eu"},
    ]
    assert payload["metadata"]["owner_name"] == "carol" and payload["state"] == ""
    assert client.get(f"/api/v2/workspaces/{workspace['id']}", headers=carol.auth).json["status"] == "starting"
    state = base64.b64encode(b'{"version": 4}').decode()
    assert (
        daemon.call(
            f"/jobs/{build['job']['id']}/complete",
            {"workspace_build": {"state": state, "resources": RESOURCES["start"]}},
        ).status_code
        == 204
    )
    assert client.get(f"/api/v2/workspaces/{workspace['id']}", headers=carol.auth).json["status"] == "running"
    agents = client.get(f"/api/v2/workspacebuilds/{build['id']}/resources", headers=carol.auth).json
    assert [a["name"] for r in agents for a in r["agents"]] == ["main"]

    immutable = client.post(
        f"/api/v2/workspaces/{workspace['id']}/builds",
        json={"transition": "start", "rich_parameter_values": [{"name": "region", "value": "us"}]},
        headers=carol.auth,
    )
    assert immutable.status_code == 400 and "immutable" in immutable.json["validations"][0]["detail"]
    shrink = client.post(
        f"/api/v2/workspaces/{workspace['id']}/builds",
        json={"transition": "start", "rich_parameter_values": [{"name": "size", "value": "0"}]},
        headers=carol.auth,
    )
    assert shrink.status_code == 400
    stop = client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=carol.auth)
    assert stop.status_code == 201 and stop.json["build_number"] == 2
    stop_payload = daemon.call(f"/jobs/{stop.json['job']['id']}/acquire").json["workspace_build"]
    assert base64.b64decode(stop_payload["state"]) == b'{"version": 4}'
    assert stop_payload["parameters"] == payload["parameters"]
    failed = daemon.call(
        f"/jobs/{stop.json['job']['id']}/fail", {"error": "boom", "state": base64.b64encode(b"partial").decode()}
    )
    assert failed.status_code == 204
    after = client.get(f"/api/v2/workspaces/{workspace['id']}", headers=carol.auth).json
    assert after["status"] == "failed" and after["latest_build"]["job"]["error"] == "boom"
    retry = client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=carol.auth)
    retried = daemon.call(f"/jobs/{retry.json['job']['id']}/acquire").json["workspace_build"]
    assert base64.b64decode(retried["state"]) == b"partial"


def test_visibility_per_persona(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    carol, dave, bob, alice = (personas[n] for n in ("carol", "dave", "bob", "alice"))
    body = {"template_id": template["id"], "name": "mine", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    workspace = client.post("/api/v2/workspaces", json=body, headers=carol.auth).json
    assert client.get(f"/api/v2/workspaces/{workspace['id']}", headers=dave.auth).status_code == 404
    assert (
        client.get(f"/api/v2/workspacebuilds/{workspace['latest_build']['id']}/logs", headers=dave.auth).status_code
        == 404
    )
    assert [w["name"] for w in client.get("/api/v2/workspaces", headers=dave.auth).json] == []
    assert client.get(f"/api/v2/workspaces/{workspace['id']}", headers=bob.auth).status_code == 200
    # template admins read everyone's workspaces but do not act on them; owners do
    stop = {"transition": "stop"}
    assert client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json=stop, headers=bob.auth).status_code == 403
    assert (
        client.patch(f"/api/v2/workspacebuilds/{workspace['latest_build']['id']}/cancel", headers=dave.auth).status_code
        == 404
    )
    assert (
        client.patch(
            f"/api/v2/workspacebuilds/{workspace['latest_build']['id']}/cancel", headers=alice.auth
        ).status_code
        == 200
    )
    # members cannot push templates or read import logs
    assert client.post("/api/v2/files", data=b"x", headers=carol.auth).status_code == 403
    assert (
        client.get(f"/api/v2/templateversions/{template['active_version_id']}/logs", headers=carol.auth).status_code
        == 403
    )


def test_cancel_and_acquire_never_both_win(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon = FakeDaemon(client)
    version = push_version(client, personas["bob"])
    job_id = version["job"]["id"]
    canceled = client.patch(f"/api/v2/templateversions/{version['id']}/cancel", headers=personas["bob"].auth)
    assert canceled.json["job"]["status"] == "canceled"
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 409
    again = client.patch(f"/api/v2/templateversions/{version['id']}/cancel", headers=personas["bob"].auth)
    assert again.status_code == 400

    running = push_version(client, personas["bob"])
    assert daemon.call(f"/jobs/{running['job']['id']}/acquire").status_code == 200
    canceling = client.patch(f"/api/v2/templateversions/{running['id']}/cancel", headers=personas["bob"].auth)
    assert canceling.json["job"]["status"] == "canceling"
    assert daemon.call(f"/jobs/{running['job']['id']}/logs", {"logs": []}).json["canceled"] is True
    daemon.call(f"/jobs/{running['job']['id']}/fail", {"error": "canceled by user"})


def test_daemons_are_known_by_identity_so_same_named_hosts_never_fail_each_others_jobs(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """Two hosts both called "builder" (or two replicas' builtin-1): the second registering is another daemon."""
    first = FakeDaemon(client, "builder", instance_id="6f1c0d0e-0000-4000-8000-000000000001")
    version = push_version(client, personas["bob"])
    job_id = version["job"]["id"]
    assert first.call(f"/jobs/{job_id}/acquire").status_code == 200
    second = FakeDaemon(client, "builder", instance_id="6f1c0d0e-0000-4000-8000-000000000002")
    assert second.id != first.id
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["status"] == "running", job
    # The first host restarts (same identity, renamed meanwhile): what it held is failed, and its label follows.
    again = FakeDaemon(client, "builder-eu", instance_id="6f1c0d0e-0000-4000-8000-000000000001")
    assert again.id == first.id
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["status"] == "failed" and "restarted" in job["error"]
    names = {daemon["id"]: daemon["name"] for daemon in client.get(
        "/api/v2/provisionerdaemons", headers=personas["alice"].auth
    ).json}  # fmt: skip
    assert names[first.id] == "builder-eu" and names[second.id] == "builder"


def test_a_daemon_asking_again_for_the_job_it_holds_gets_it_again(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """The reply to an acquire was lost: the daemon's retry must not strand the job it claimed."""
    daemon, other = FakeDaemon(client, "d1"), FakeDaemon(client, "d2")
    version = push_version(client, personas["bob"])
    job_id = version["job"]["id"]
    first = daemon.call(f"/jobs/{job_id}/acquire")
    again = daemon.call(f"/jobs/{job_id}/acquire")
    assert first.status_code == again.status_code == 200
    assert again.json == first.json
    assert other.call(f"/jobs/{job_id}/acquire").status_code == 409
    assert daemon.call(f"/jobs/{job_id}/fail", {"error": "boom"}).status_code == 204
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 409  # once it ended, it is nobody's


def test_jobs_belong_to_the_daemon_that_acquired_them(client: FlaskClient, personas: dict[str, Persona]) -> None:
    first, second = FakeDaemon(client, "d1"), FakeDaemon(client, "d2")
    version = push_version(client, personas["bob"])
    job_id = version["job"]["id"]
    assert first.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert second.call(f"/jobs/{job_id}/acquire").status_code == 409
    assert second.call(f"/jobs/{job_id}/logs", {"logs": []}).status_code == 403
    assert second.call(f"/jobs/{job_id}/complete", {}).status_code == 403
    # the first daemon restarts: what it held is failed, not left running forever
    FakeDaemon(client, "d1")
    job = client.get(f"/api/v2/templateversions/{version['id']}", headers=personas["bob"].auth).json["job"]
    assert job["status"] == "failed" and "restarted" in job["error"]


def test_daemon_credentials_and_tags(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bad = client.post("/api/v2/provisionerd/register", json={"name": "x"}, headers={"Slipway-Provisioner-PSK": "wrong"})
    assert bad.status_code == 401
    assert client.post("/api/v2/provisionerd/register", json={"name": "x"}).status_code == 401
    too_many = client.post(
        "/api/v2/provisionerd/register",
        json={"name": "x", "tags": {f"k{i}": "v" for i in range(9)}},
        headers={"Slipway-Provisioner-PSK": PSK},
    )
    assert too_many.status_code == 400 and "at most 8 tags" in too_many.json["message"]
    tagged = FakeDaemon(client, "gpu", {"gpu": "a100"})
    version = push_version(client, personas["bob"])  # untagged job
    assert tagged.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200  # default rule: any


def test_upload_checks(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob = personas["bob"].auth
    assert client.post("/api/v2/files", data=b"not an archive at all", headers=bob).status_code == 400
    huge = client.post("/api/v2/files", data=b"0" * (10 * 1024 * 1024 + 1), headers=bob)
    assert huge.status_code == 413 and "10 MiB" in huge.json["message"]
    archive = tar_of({"main.tf": ""})
    first = client.post("/api/v2/files", data=archive, headers=bob).json
    assert client.post("/api/v2/files", data=archive, headers=bob).json["id"] == first["id"]  # content-addressed
    assert client.post("/api/v2/templateversions", json={"file_id": "nope"}, headers=bob).status_code == 404
    assert client.get("/api/v2/templates/nope", headers=bob).status_code == 404
    assert (
        client.post("/api/v2/templates", json={"name": "bad name", "version_id": "x"}, headers=bob).status_code == 400
    )
