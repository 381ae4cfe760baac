"""What organisation roles grant (issue 40 part 3): an organisation's template admins and admins administer its
templates as site template admins do (create, push, settings, access lists, their workspaces), its auditors read
everything there and change nothing, and none of them reaches another organisation's. One app per database: the
setup (two organisations, their daemons, templates, workspaces and groups) is made once and every role is checked
against it."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.organizations.models import ORG_ROLE_ADMIN, ORG_ROLE_AUDITOR, ORG_ROLE_TEMPLATE_ADMIN
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon, import_template, push_version
from tests.support.organizations import add_organization
from tests.support.permissions import more_personas
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

API = "/api/v2"


def _people(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> dict[str, Persona]:
    """alice (owner), bob (site template admin), and for acme: carol (its template admin), dave (its auditor), erin (a
    member) and gina (its organisation admin, made through the API with a session token of her own)."""
    people = more_personas(app, personas)
    alice = people["alice"]
    created = client.post(
        f"{API}/users", json={"username": "gina", "email": "gina@example.com", "password": PASSWORD}, headers=alice.auth
    )
    assert created.status_code == 201, created.json
    login = client.post(f"{API}/users/login", json={"email": "gina@example.com", "password": PASSWORD})
    assert login.status_code == 201, login.json
    people["gina"] = Persona(created.json["id"], "gina", "gina@example.com", PASSWORD, login.json["session_token"])
    return people


def _set_roles(client: FlaskClient, owner: Persona, organization: str, person: Persona, roles: list[str]) -> None:
    changed = client.put(
        f"{API}/organizations/{organization}/members/{person.id}/roles", json={"roles": roles}, headers=owner.auth
    )
    assert changed.status_code == 200, changed.json


def _imported(client: FlaskClient, daemon: FakeDaemon, version: dict[str, Any]) -> None:
    """The stand-in daemon imports the pushed version (no parameters, nothing to publish)."""
    job_id = version["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    done = daemon.call(
        f"/jobs/{job_id}/complete",
        {"template_import": {"readme": "", "parameters": [], "variables": [], "resources": {"start": [], "stop": []}}},
    )
    assert done.status_code == 204, done.json


def _names(response: Any, key: str = "name") -> set[str]:
    assert response.status_code == 200, response.json
    return {item[key] for item in response.json}


def _authcheck(client: FlaskClient, person: Persona, template_id: str) -> dict[str, bool]:
    checks = {
        action: {"object": {"resource_type": "template", "resource_id": template_id}, "action": action}
        for action in ("read", "update", "view_insights")
    }
    checks["create"] = {"object": {"resource_type": "template"}, "action": "create"}
    answer = client.post(f"{API}/authcheck", json={"checks": checks}, headers=person.auth)
    assert answer.status_code == 200, answer.json
    return dict(answer.json)


def test_organisation_roles_reach_their_organisation_only(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    people = _people(app, client, personas)
    alice, bob, carol, dave, erin, gina = (people[name] for name in ("alice", "bob", "carol", "dave", "erin", "gina"))
    add_organization(app, "acme", [bob.id, carol.id, dave.id, erin.id, gina.id])
    add_organization(app, "beta", [bob.id])
    _set_roles(client, alice, "acme", carol, [ORG_ROLE_TEMPLATE_ADMIN])
    _set_roles(client, alice, "acme", dave, [ORG_ROLE_AUDITOR])
    _set_roles(client, alice, "acme", gina, [ORG_ROLE_ADMIN])

    ours, theirs = FakeDaemon(client, "ours", organization="acme"), FakeDaemon(client, "theirs", organization="beta")
    in_a = import_template(client, people, ours, name="tpl-a", organization="acme")
    in_b = import_template(client, people, theirs, name="tpl-b", organization="beta")
    body = {"name": "ws-a", "template_id": in_a["id"], "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    created = client.post(f"{API}/workspaces", json=body, headers=erin.auth)
    assert created.status_code == 201, created.json
    ws_a = created.json
    body = {"name": "ws-b", "template_id": in_b["id"], "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    assert client.post(f"{API}/workspaces", json=body, headers=bob.auth).status_code == 201
    for organization, group in (("acme", "ga"), ("beta", "gb")):
        made = client.post(f"{API}/organizations/{organization}/groups", json={"name": group}, headers=alice.auth)
        assert made.status_code == 201, made.json

    # The template API: A's templates are theirs to read (everyone here) and to manage (template admins, admins);
    # B's do not exist for them.
    for person in (carol, dave, erin, gina):
        assert _names(client.get(f"{API}/templates", headers=person.auth)) == {"tpl-a"}, person.username
        assert client.get(f"{API}/templates/{in_a['id']}", headers=person.auth).status_code == 200
        assert client.get(f"{API}/templates/{in_b['id']}", headers=person.auth).status_code == 404
        assert client.patch(f"{API}/templates/{in_b['id']}", json={}, headers=person.auth).status_code == 404
        acl = client.get(f"{API}/templates/{in_a['id']}/acl", headers=person.auth).status_code
        assert acl == (403 if person is erin else 200), person.username
    for person, expected in ((carol, 200), (gina, 200), (dave, 403), (erin, 403)):
        changed = client.patch(
            f"{API}/templates/{in_a['id']}", json={"description": person.username}, headers=person.auth
        )
        assert changed.status_code == expected, (person.username, changed.json)
        grant = {"user_perms": {erin.id: "use"}}
        acl_change = client.patch(f"{API}/templates/{in_a['id']}/acl", json=grant, headers=person.auth)
        assert acl_change.status_code == expected, (person.username, acl_change.json)

    # Pushing and creating: into A for its template admins and admins; never into B (not a member: 404); the
    # auditor and the member push nothing.
    for person in (carol, gina):
        version = push_version(client, person, organization="acme")
        _imported(client, ours, version)
        made = client.post(
            f"{API}/organizations/acme/templates",
            json={"name": f"by-{person.username}", "version_id": version["id"]},
            headers=person.auth,
        )
        assert made.status_code == 201, made.json
        assert made.json["organization_id"] == in_a["organization_id"]
        pushed = client.post(f"{API}/organizations/beta/templateversions", json={"file_id": "x"}, headers=person.auth)
        assert pushed.status_code == 404
        wrong = client.post(
            f"{API}/organizations/beta/templates",
            json={"name": "nope", "version_id": version["id"]},
            headers=person.auth,
        )
        assert wrong.status_code == 404
    # A version of A's is not made a template of another organisation through Coder's path (owners neither).
    version = push_version(client, carol, organization="acme")
    _imported(client, ours, version)
    elsewhere = client.post(
        f"{API}/organizations/default/templates",
        json={"name": "moved", "version_id": version["id"]},
        headers=alice.auth,
    )
    assert elsewhere.status_code == 400, elsewhere.json
    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
    for person in (dave, erin):
        upload = client.post(f"{API}/files", data=archive, headers={**person.auth, "Content-Type": "application/x-tar"})
        assert upload.status_code == 403, upload.json
        made = client.post(
            f"{API}/organizations/acme/templates",
            json={"name": "nope", "version_id": version["id"]},
            headers=person.auth,
        )
        assert made.status_code == 403, made.json

    # Workspaces: A's template admins, admins and auditor see the workspaces of A's templates, not B's; the member
    # only their own. The auditor cannot build them; the template admin can, as a template's admins do.
    for person in (carol, dave, gina):
        assert _names(client.get(f"{API}/workspaces", headers=person.auth)) >= {"ws-a"}
        assert "ws-b" not in _names(client.get(f"{API}/workspaces?q=ws", headers=person.auth))
        assert client.get(f"{API}/workspaces/{ws_a['id']}", headers=person.auth).status_code == 200
    assert _names(client.get(f"{API}/workspaces", headers=erin.auth)) == {"ws-a"}
    stop = {"transition": "stop"}
    refused = client.post(f"{API}/workspaces/{ws_a['id']}/builds", json=stop, headers=dave.auth)
    assert refused.status_code in (403, 404), refused.json
    allowed = client.post(f"{API}/workspaces/{ws_a['id']}/builds", json=stop, headers=carol.auth)
    assert allowed.status_code not in (403, 404), allowed.json

    # Groups: every one of A for its template admins, admins and auditor (no change for the auditor); the member
    # sees those they are in; B's stay hidden.
    for person in (carol, dave, gina):
        assert _names(client.get(f"{API}/organizations/acme/groups", headers=person.auth)) == {"Everyone", "ga"}
        assert _names(client.get(f"{API}/organizations/beta/groups", headers=person.auth)) == set()
    assert _names(client.get(f"{API}/organizations/acme/groups", headers=erin.auth)) == {"Everyone"}
    made = client.post(f"{API}/organizations/acme/groups", json={"name": "nope"}, headers=dave.auth)
    assert made.status_code == 403, made.json

    # Provisioner daemons and jobs: A's, for its template admins, admins and auditor; members none (403).
    for person in (carol, dave, gina):
        assert _names(client.get(f"{API}/provisionerdaemons", headers=person.auth)) == {"ours"}
        jobs = client.get(f"{API}/provisionerjobs", headers=person.auth)
        assert {job["organization_id"] for job in jobs.json} == {in_a["organization_id"]}, person.username
    assert _names(client.get(f"{API}/provisionerdaemons", headers=alice.auth)) >= {"ours", "theirs"}
    assert client.get(f"{API}/provisionerdaemons", headers=erin.auth).status_code == 403
    assert client.get(f"{API}/provisionerjobs", headers=erin.auth).status_code == 403

    # Insights of A's templates: its template admins, admins and auditor; never of B's; not the member's.
    for person in (carol, dave, gina):
        daus = client.get(f"{API}/insights/daus?template_ids={in_a['id']}", headers=person.auth)
        assert daus.status_code == 200, (person.username, daus.json)
        other = client.get(f"{API}/insights/daus?template_ids={in_b['id']}", headers=person.auth)
        assert other.status_code in (403, 404), (person.username, other.json)
    assert client.get(f"{API}/insights/daus", headers=erin.auth).status_code == 403

    # The audit log stays the site auditors' and owners' (its entries carry no organisation).
    for person in (carol, dave, erin, gina):
        assert client.get(f"{API}/audit", headers=person.auth).status_code == 403

    # Authcheck answers from the same rules.
    expected = {
        "carol": ({"read": True, "update": True, "view_insights": True, "create": True}, False),
        "gina": ({"read": True, "update": True, "view_insights": True, "create": True}, False),
        "dave": ({"read": True, "update": False, "view_insights": True, "create": False}, False),
        "erin": ({"read": True, "update": False, "view_insights": False, "create": False}, False),
    }
    for name, (on_a, on_b) in expected.items():
        assert _authcheck(client, people[name], in_a["id"]) == on_a, name
        answers = _authcheck(client, people[name], in_b["id"])
        assert (answers["read"], answers["update"]) == (on_b, on_b), name

    # The owner sees every organisation.
    assert _names(client.get(f"{API}/organizations", headers=alice.auth)) == {"default", "acme", "beta"}

    # The dashboard: the template admin of A has the upload form with A to choose, and creates a template there.
    browser = app.test_client()
    sign_in(browser, carol.email, PASSWORD)
    page = browser.get("/templates")
    assert page.status_code == 200
    assert 'name="organization"' in page.text and ">acme<" in page.text and ">beta<" not in page.text
    assert browser.get("/templates/tpl-b").status_code == 404
    uploaded = post_form(
        browser,
        "/templates",
        {"name": "from-form", "organization": in_a["organization_id"], "files": (io.BytesIO(archive), "t.tar")},
        token_from="/templates",
    )
    assert uploaded.status_code == 302, uploaded.text
    newest = client.get(f"{API}/provisionerjobs?limit=1", headers=carol.auth).json[0]
    assert (newest["type"], newest["organization_id"]) == ("template_version_import", in_a["organization_id"])
    browser = app.test_client()
    sign_in(browser, dave.email, PASSWORD)
    page = browser.get("/templates")
    assert page.status_code == 200 and "tpl-a" in page.text and 'name="organization"' not in page.text
