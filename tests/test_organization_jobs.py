"""Jobs belong to an organisation, and only that organisation's daemons see or take them (issue 40 part 2): queues,
the long poll, acquisition, queue positions and the queue-depth metric, with daemons registered by the PSK, a
provisioner key and a person's token."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import PSK_HEADERS, FakeDaemon, push_version
from tests.support.organizations import add_organization
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _wait(daemon: FakeDaemon, seconds: int = 1) -> Any:
    return daemon.call("/jobs/wait", {"timeout_seconds": seconds})


def _queues(app: Flask, daemon: FakeDaemon) -> list[str]:
    with app.app_context():
        found = db.session.get_one(ProvisionerDaemon, daemon.id)
        return found.queue_names(app.config["SLIPWAY_SETTINGS"].provisioner_untagged_jobs)


def test_each_organisations_daemons_take_only_its_jobs(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob = personas["alice"], personas["bob"]
    acme_id = add_organization(app, "acme", [bob.id])
    ours = FakeDaemon(client, "ours")
    theirs = FakeDaemon(client, "theirs", organization="acme")
    assert ours.registration["organization"] == "default" and theirs.registration["organization"] == "acme"
    default_job = push_version(client, bob)["job"]
    acme_job = push_version(client, bob, organization="acme")["job"]
    assert default_job["organization_id"] != acme_id and acme_job["organization_id"] == acme_id

    with app.app_context():
        queue_of = {job.id: job.queue for job in db.session.scalars(db.select(ProvisionerJob))}
    assert queue_of[acme_job["id"]] in _queues(app, theirs) and queue_of[acme_job["id"]] not in _queues(app, ours)
    assert queue_of[default_job["id"]] in _queues(app, ours) and queue_of[default_job["id"]] not in _queues(app, theirs)

    # Each sees its own organisation's job in the queue, one daemon able to take it.
    for job in (default_job, acme_job):
        shown = client.get(f"/api/v2/provisionerjobs/{job['id']}", headers=alice.auth).json
        assert (shown["queue_position"], shown["available_workers"]) == (1, 1), shown
    metrics = client.get("/metrics", headers=alice.auth).text
    depth = f'slipway_provisioner_queue_depth{{queue="slipway:jobs:{acme_id}/owner=&scope=organization"}} 1.0'
    assert depth in metrics and 'queue="slipway:jobs:owner=&scope=organization"} 1.0' in metrics

    # "Which daemons would take it" answers within the organisation asked about.
    for organization, expected in (("acme", ["theirs"]), ("default", ["ours"]), (acme_id, ["theirs"])):
        listed = client.get(f"/api/v2/provisionerdaemons?tags={{}}&organization={organization}", headers=bob.auth)
        assert [daemon["name"] for daemon in listed.json] == expected
    listed = client.get("/api/v2/provisionerdaemons", headers=bob.auth).json
    assert {daemon["name"]: daemon["organization_id"] for daemon in listed}["theirs"] == acme_id

    # The long poll offers each daemon its own organisation's job, never the other's.
    assert _wait(ours).json == {"job_id": default_job["id"]}
    assert _wait(theirs).json == {"job_id": acme_job["id"]}
    # Acquiring the other's job is as if it did not exist.
    assert ours.call(f"/jobs/{acme_job['id']}/acquire").status_code == 404
    assert theirs.call(f"/jobs/{default_job['id']}/acquire").status_code == 404
    assert ours.call(f"/jobs/{default_job['id']}/acquire").status_code == 200
    # With its own job taken, the default daemon waits in vain while acme's job is still pending.
    assert _wait(ours).status_code == 204
    assert client.get(f"/api/v2/provisionerjobs/{acme_job['id']}", headers=alice.auth).json["status"] == "pending"
    assert theirs.call(f"/jobs/{acme_job['id']}/acquire").status_code == 200

    # The Provisioners page says whose jobs each daemon runs, now that there are two organisations.
    sign_in(client, bob.email, PASSWORD)
    page = client.get("/provisioners").text
    assert "<th>Organisation</th>" in page
    assert re.search(r'data-daemon="theirs">.*?data-organization="acme"', page, re.S)
    assert re.search(r'data-daemon="ours">.*?data-organization="default"', page, re.S)


def test_a_job_whose_organisation_has_no_daemon_says_no_daemon_matches(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    add_organization(app, "acme", [bob.id])
    FakeDaemon(client, "ours")  # the default organisation's: it does not count for acme's jobs
    job = push_version(client, bob, organization="acme")["job"]
    assert (job["queue_position"], job["available_workers"]) == (0, 0)


def test_a_daemon_serves_the_one_organisation_its_credential_allows(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, carol, dave = personas["bob"], personas["carol"], personas["dave"]
    acme_id = add_organization(app, "acme", [bob.id, carol.id])

    def register(headers: dict[str, str], **body: Any) -> Any:
        return client.post("/api/v2/provisionerd/register", json={"name": "d", **body}, headers=headers)

    unknown = register(PSK_HEADERS, organization="nope")
    assert unknown.status_code == 400 and "No organisation 'nope'" in unknown.json["message"]
    assert register(PSK_HEADERS, organization=acme_id).json["organization"] == "acme"  # by id as well as by name
    # A person's own daemon: in organisations they belong to, and no other.
    assert register(carol.auth, tags={"scope": "user"}, organization="acme").json["organization"] == "acme"
    refused = register(dave.auth, tags={"scope": "user"}, organization="acme")
    assert refused.status_code == 400 and "No organisation 'acme'" in refused.json["message"]
    # A key belongs to its organisation: naming another is a clear error, naming none is the key's.
    key = client.post("/api/v2/provisionerkeys", json={"name": "k", "tags": {}}, headers=bob.auth).json
    key_headers = {"Slipway-Provisioner-Key": key["key"]}
    wrong = register(key_headers, organization="acme")
    assert wrong.status_code == 400 and "belongs to organisation default" in wrong.json["message"]
    assert register(key_headers).json["organization"] == "default"


def test_versions_are_pushed_to_an_organisation_by_those_who_may(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob, carol, dave = personas["alice"], personas["bob"], personas["carol"], personas["dave"]
    add_organization(app, "acme", [bob.id, carol.id])
    file_id = client.post(
        "/api/v2/files", data=_archive(), headers={**bob.auth, "Content-Type": "application/x-tar"}
    ).json["id"]

    def push(persona: Persona, organization: str, **body: Any) -> Any:
        return client.post(
            f"/api/v2/organizations/{organization}/templateversions", json={"file_id": file_id, **body},
            headers=persona.auth,
        )  # fmt: skip

    assert push(bob, "acme").status_code == 201
    assert push(alice, "acme").status_code == 201  # an owner, not a member
    assert push(carol, "acme").status_code == 403  # a member, but no template admin
    assert push(dave, "acme").status_code == 404  # not a member: no such organisation
    assert push(bob, "nope").status_code == 404
    # A template of the default organisation is not pushed to through acme's path.
    with app.app_context():
        from app.catalog.models import Template

        template = Template(name="elsewhere", created_by=bob.id)
        db.session.add(template)
        db.session.commit()
        template_id = template.id
    assert push(bob, "acme", template_id=template_id).status_code == 404


def _archive() -> bytes:
    from tests.support.archives import tar_of

    return tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})


def test_concurrent_waits_of_two_organisations_each_get_their_own(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """Both daemons already waiting when the jobs are queued: each wakes for its own organisation's job only."""
    bob = personas["bob"]
    add_organization(app, "acme", [bob.id])
    ours, theirs = FakeDaemon(client, "ours"), FakeDaemon(client, "theirs", organization="acme")
    replies: list[Any] = []

    def wait() -> None:
        own = app.test_client()
        headers = {**theirs.credential, "Slipway-Provisioner-Daemon": theirs.id}
        replies.append(own.post("/api/v2/provisionerd/jobs/wait", json={"timeout_seconds": 30}, headers=headers))

    waiting = threading.Thread(target=wait)
    waiting.start()
    default_job = push_version(client, bob)["job"]  # queued first: acme's waiting daemon must not be offered it
    acme_job = push_version(client, bob, organization="acme")["job"]
    waiting.join(timeout=60)
    assert [reply.json for reply in replies] == [{"job_id": acme_job["id"]}]
    assert _wait(ours).json == {"job_id": default_job["id"]}
