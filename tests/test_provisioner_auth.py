"""Who may run which daemon (reference §3.2), and provisioner keys (API.md "Provisioners"), over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.users.models import User
from tests.conftest import Persona
from tests.support.daemon import PSK_HEADERS, FakeDaemon, push_version

pytestmark = pytest.mark.databases("sqlite")

REGISTER = "/api/v2/provisionerd/register"


def _register(client: FlaskClient, headers: dict[str, str], tags: dict[str, str] | None = None) -> Any:
    return client.post(REGISTER, json={"name": "ext-1", "tags": tags or {}}, headers=headers)


def _key(client: FlaskClient, admin: Persona, name: str = "gpu", tags: dict[str, str] | None = None) -> Any:
    return client.post("/api/v2/provisionerkeys", json={"name": name, "tags": tags or {}}, headers=admin.auth)


def test_register_reply_tells_the_daemon_how_often(client: FlaskClient) -> None:
    daemon = FakeDaemon(client)
    reply = daemon.registration
    # A PSK daemon the operator did not trust with Redis waits for jobs over HTTP (tests/test_daemon_trust.py).
    assert reply["redis_url"] is None and reply["queues"] == []
    assert reply["heartbeat_seconds"] > 0 and reply["force_cancel_seconds"] == 600
    assert daemon.call("/heartbeat").status_code == 200


@pytest.mark.parametrize(
    ("headers", "status", "words"),
    [
        ({}, 401, "must authenticate"),
        ({"Slipway-Provisioner-PSK": "wrong"}, 401, "PSK is wrong"),
        ({"Slipway-Provisioner-Key": "short"}, 401, "not a provisioner key"),
        ({"Slipway-Provisioner-Key": "x" * 43}, 401, "unknown or was deleted"),
        ({"Authorization": "Bearer nope-nope"}, 401, "invalid"),
        ({**PSK_HEADERS, "Slipway-Provisioner-Key": "x" * 43}, 400, "one credential"),
    ],
)
def test_bad_credentials_are_refused_with_a_reason(
    client: FlaskClient, headers: dict[str, str], status: int, words: str
) -> None:
    reply = _register(client, headers)
    assert reply.status_code == status
    assert words in reply.json["message"]


def test_a_psk_daemon_serves_the_organization_whatever_it_asks(client: FlaskClient) -> None:
    daemon = FakeDaemon(client, tags={"scope": "user", "env": "prod"})
    assert daemon.tags == {"scope": "organization", "owner": "", "env": "prod"}


def test_provisioner_keys_lifecycle(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, carol = personas["bob"], personas["carol"]
    created = _key(client, bob, tags={"pool": "gpu"})
    assert created.status_code == 201
    secret = created.json["key"]
    assert len(secret) == 43 and created.json["tags"] == {"pool": "gpu", "scope": "organization", "owner": ""}
    listed = client.get("/api/v2/provisionerkeys", headers=bob.auth).json
    assert [key["name"] for key in listed] == ["gpu"] and "key" not in listed[0]
    assert secret not in str(listed)
    assert _key(client, bob).status_code == 409
    reserved = _key(client, bob, name="psk")
    assert reserved.status_code == 400 and reserved.json["validations"][0]["field"] == "name"
    bad_tags = client.post("/api/v2/provisionerkeys", json={"name": "x", "tags": ["a"]}, headers=bob.auth)
    assert bad_tags.status_code == 400
    assert _key(client, carol, name="mine").status_code == 403
    assert client.delete("/api/v2/provisionerkeys/psk", headers=bob.auth).status_code == 400
    assert client.delete("/api/v2/provisionerkeys/nope", headers=bob.auth).status_code == 404
    assert client.delete("/api/v2/provisionerkeys/gpu", headers=bob.auth).status_code == 204
    assert client.get("/api/v2/provisionerkeys", headers=bob.auth).json == []


def test_a_key_daemon_gets_the_keys_tags_and_stops_when_the_key_is_deleted(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    secret = _key(client, bob, tags={"pool": "gpu"}).json["key"]
    key_headers = {"Slipway-Provisioner-Key": secret}
    widened = _register(client, key_headers, {"pool": "cpu"})
    assert widened.status_code == 400 and "key's tags" in widened.json["message"]
    daemon = FakeDaemon(client, credential=key_headers)
    assert daemon.tags == {"pool": "gpu", "scope": "organization", "owner": ""}
    listed = client.get("/api/v2/provisionerdaemons", headers=bob.auth).json
    assert [(d["name"], d["key_name"], d["status"]) for d in listed] == [("d1", "gpu", "idle")]

    assert client.delete("/api/v2/provisionerkeys/gpu", headers=bob.auth).status_code == 204
    refused = daemon.call("/heartbeat")
    assert refused.status_code == 401 and "deleted" in refused.json["message"]
    assert _register(client, key_headers).status_code == 401


def test_user_token_daemons_by_role(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, carol = personas["bob"], personas["carol"]
    member_org = _register(client, carol.auth)
    assert member_org.status_code == 403 and "scope=user" in member_org.json["message"]
    mine = FakeDaemon(client, "laptop", {"scope": "user"}, credential=carol.auth)
    assert mine.tags == {"scope": "user", "owner": carol.id}
    admin_org = FakeDaemon(client, "ci", {"env": "ci"}, credential=bob.auth)
    assert admin_org.tags == {"scope": "organization", "owner": "", "env": "ci"}

    with app.app_context():  # demoted: the organization daemon is refused at its next call
        user = db.session.get(User, bob.id)
        assert user is not None
        user.roles = []
        db.session.commit()
    assert admin_org.call("/heartbeat").status_code == 403

    with app.app_context():  # suspended: every daemon of theirs is refused
        user = db.session.get(User, carol.id)
        assert user is not None
        user.status = "suspended"
        db.session.commit()
    refused = mine.call("/heartbeat")
    assert refused.status_code == 401 and "suspended" in refused.json["message"]


def test_a_user_scoped_daemon_only_gets_its_owners_user_scoped_jobs(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, alice = personas["bob"], personas["alice"]
    org_job = push_version(client, bob)["job"]
    bobs_job = _push_tagged(client, bob, {"scope": "user"})["job"]
    alices_job = _push_tagged(client, alice, {"scope": "user"})["job"]
    assert bobs_job["tags"] == {"scope": "user", "owner": bob.id}
    bobs_daemon = FakeDaemon(client, "bob-laptop", {"scope": "user"}, credential=bob.auth)
    assert bobs_daemon.call(f"/jobs/{org_job['id']}/acquire").status_code == 403
    assert bobs_daemon.call(f"/jobs/{alices_job['id']}/acquire").status_code == 403
    assert bobs_daemon.call(f"/jobs/{bobs_job['id']}/acquire").status_code == 200
    # And an organization daemon never takes a user's job.
    assert FakeDaemon(client, "org").call(f"/jobs/{alices_job['id']}/acquire").status_code == 403


def _push_tagged(client: FlaskClient, admin: Persona, tags: dict[str, str]) -> dict[str, Any]:
    from tests.support.archives import tar_of

    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
    upload = client.post("/api/v2/files", data=archive, headers={**admin.auth, "Content-Type": "application/x-tar"})
    version = client.post(
        "/api/v2/templateversions", json={"file_id": upload.json["id"], "provisioner_tags": tags}, headers=admin.auth
    )
    assert version.status_code == 201, version.json
    return dict(version.json)
