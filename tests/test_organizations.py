"""Organisations as Coder's API has them: owners create, rename, restyle and delete them (not the default one, nor
one that still holds templates or workspaces); owners, user admins and an organisation's own admins and user
admins manage its members and their roles; members see their own organisations, and nobody else's."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.catalog.models import Template
from app.core.extensions import db
from app.groups.models import GroupMember
from app.organizations.models import DEFAULT_ORGANIZATION_ID, ORG_ROLES, OrganizationMember
from app.provisioning.models import ProvisionerJob
from app.workspaces.models import Workspace
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.permissions import more_personas
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

ORGS = "/api/v2/organizations"


@pytest.fixture
def people(app: Flask, personas: dict[str, Persona]) -> dict[str, Persona]:
    return more_personas(app, personas)


def _create(client: FlaskClient, owner: Persona, name: str = "acme", **more: str) -> dict[str, Any]:
    created = client.post(ORGS, json={"name": name, **more}, headers=owner.auth)
    assert created.status_code == 201, created.json
    return dict(created.json)


def _member_names(client: FlaskClient, org: str, persona: Persona, query: str = "") -> list[str]:
    listed = client.get(f"{ORGS}/{org}/members{query}", headers=persona.auth)
    assert listed.status_code == 200, listed.json
    return [member["username"] for member in listed.json]


def test_an_owner_creates_renames_restyles_and_deletes_an_organization(
    client: FlaskClient, people: dict[str, Persona]
) -> None:
    alice = people["alice"]
    acme = _create(client, alice, "acme", description="Rockets", icon="/icon/rocket.svg")
    assert (acme["name"], acme["display_name"], acme["description"], acme["icon"], acme["is_default"]) == (
        "acme", "acme", "Rockets", "/icon/rocket.svg", False
    )  # fmt: skip
    # By id, by name whatever its case; the list has the default one first.
    for reference in (acme["id"], "acme", "ACME"):
        assert client.get(f"{ORGS}/{reference}", headers=alice.auth).json["id"] == acme["id"]
    assert [org["name"] for org in client.get(ORGS, headers=alice.auth).json] == ["default", "acme"]
    # Its Everyone group exists, and its creator is its first member, as its admin.
    groups = client.get(f"{ORGS}/acme/groups", headers=alice.auth).json
    assert [(group["name"], group["id"]) for group in groups] == [("Everyone", acme["id"])]
    members = client.get(f"{ORGS}/acme/members", headers=alice.auth).json
    assert [(m["username"], [r["name"] for r in m["roles"]]) for m in members] == [("alice", ["organization-admin"])]
    assert members[0]["global_roles"][0] == {"name": "owner", "display_name": "Owner", "organization_id": ""}

    body = {"name": "acme-corp", "display_name": "Acme Corporation", "description": "", "icon": "https://x.test/a.png"}
    changed = client.patch(f"{ORGS}/acme", json=body, headers=alice.auth)
    assert changed.status_code == 200, changed.json
    assert {key: changed.json[key] for key in body} == body
    assert client.get(f"{ORGS}/acme", headers=alice.auth).status_code == 404
    # Only the fields given change.
    kept = client.patch(f"{ORGS}/acme-corp", json={"description": "Anvils"}, headers=alice.auth).json
    assert (kept["name"], kept["display_name"], kept["description"]) == ("acme-corp", "Acme Corporation", "Anvils")

    deleted = client.delete(f"{ORGS}/acme-corp", headers=alice.auth)
    assert deleted.status_code == 200, deleted.json
    assert client.get(f"{ORGS}/{acme['id']}", headers=alice.auth).status_code == 404
    assert [org["name"] for org in client.get(ORGS, headers=alice.auth).json] == ["default"]


def test_bad_input_is_a_clear_error(client: FlaskClient, people: dict[str, Persona]) -> None:
    alice = people["alice"]
    _create(client, alice, "acme")
    bad = {
        "a b": "name",
        "-acme": "name",
        "x" * 33: "name",
        "00000000-0000-4000-8000-000000000009": "name",
    }
    for name, field in bad.items():
        reply = client.post(ORGS, json={"name": name}, headers=alice.auth)
        assert reply.status_code == 400, (name, reply.json)
        assert [v["field"] for v in reply.json["validations"]] == [field]
    for body, field in (
        ({"name": "ok", "icon": "javascript:alert(1)"}, "icon"),
        ({"name": "ok", "display_name": "x" * 65}, "display_name"),
        ({"name": "ok", "description": "a\x00b"}, "description"),
        ({"name": 7}, "name"),
        ({}, "name"),
    ):
        reply = client.post(ORGS, json=body, headers=alice.auth)
        assert reply.status_code == 400 and reply.json["validations"][0]["field"] == field, (body, reply.json)
    not_json = client.post(ORGS, data="{", headers={**alice.auth, "Content-Type": "application/json"})
    assert not_json.status_code == 400 and not_json.is_json
    # Taken names, whatever their case, and "default", which always means the default organisation.
    for name in ("ACME", "default", "Default"):
        reply = client.post(ORGS, json={"name": name}, headers=alice.auth)
        assert reply.status_code == 409 and reply.json["validations"][0]["field"] == "name", (name, reply.json)
    assert client.patch(f"{ORGS}/acme", json={"name": "default"}, headers=alice.auth).status_code == 409
    # The default organisation may be renamed, and "default" still finds it.
    renamed = client.patch(f"{ORGS}/default", json={"name": "main"}, headers=alice.auth)
    assert renamed.status_code == 200 and renamed.json["name"] == "main"
    assert client.get(f"{ORGS}/default", headers=alice.auth).json["id"] == DEFAULT_ORGANIZATION_ID
    assert client.get(f"{ORGS}/nosuch", headers=alice.auth).status_code == 404


def test_the_default_organization_cannot_be_deleted(client: FlaskClient, people: dict[str, Persona]) -> None:
    reply = client.delete(f"{ORGS}/default", headers=people["alice"].auth)
    assert reply.status_code == 400 and "default organisation cannot be deleted" in reply.json["message"]


def _template_in(client: FlaskClient, people: dict[str, Persona], org: str) -> dict[str, Any]:
    """A template pushed by bob into organisation ``org`` and imported there by one of its daemons."""
    assert client.post(f"{ORGS}/{org}/members/bob", headers=people["alice"].auth).status_code == 201
    daemon = FakeDaemon(client, f"{org}-daemon", organization=org)
    return import_template(client, people, daemon, name="python", organization=org)


def test_an_organization_holding_templates_or_workspaces_is_not_deleted(
    app: Flask, client: FlaskClient, people: dict[str, Persona]
) -> None:
    alice, carol = people["alice"], people["carol"]
    acme = _create(client, alice, "acme")
    template = _template_in(client, people, "acme")
    assert template["organization_id"] == acme["id"]
    assert client.post(f"{ORGS}/acme/members/carol", headers=alice.auth).status_code == 201
    body = {"template_id": template["id"], "name": "w1", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    workspace = client.post("/api/v2/workspaces", json=body, headers=carol.auth)
    assert workspace.status_code == 201, workspace.json

    refused = client.delete(f"{ORGS}/acme", headers=alice.auth)
    assert refused.status_code == 409
    assert refused.json["message"] == (
        "Organisation acme still holds 1 provisioner job queued or running and 1 workspace and templates (python): "
        "delete them before the organisation (cancel its jobs, or let them finish)."
    )
    build_job = workspace.json["latest_build"]["job"]["id"]
    assert client.patch(f"/api/v2/provisionerjobs/{build_job}/cancel", headers=alice.auth).status_code == 200
    # Nor may carol leave while she owns a workspace there.
    leaving = client.delete(f"{ORGS}/acme/members/carol", headers=alice.auth)
    assert leaving.status_code == 409 and "carol owns 1 workspace in acme" in leaving.json["message"]

    with app.app_context():  # the workspace deleted (its delete build is the workspaces' own test)
        db.session.execute(update(Workspace).where(Workspace.id == workspace.json["id"]).values(deleted=True))
        db.session.commit()
    refused = client.delete(f"{ORGS}/acme", headers=alice.auth)
    assert refused.status_code == 409 and "holds templates (python)" in refused.json["message"]
    assert client.delete(f"/api/v2/templates/{template['id']}", headers=alice.auth).status_code == 204
    assert client.delete(f"{ORGS}/acme", headers=alice.auth).status_code == 200
    # The deleted template's row stays, for its workspace's history, in the default organisation, with its jobs.
    with app.app_context():
        kept = db.session.get(Template, template["id"])
        assert kept is not None and kept.deleted_at is not None and kept.organization_id == DEFAULT_ORGANIZATION_ID
        jobs = db.session.scalars(select(ProvisionerJob.organization_id).where(ProvisionerJob.id == build_job)).all()
        assert jobs == [DEFAULT_ORGANIZATION_ID]
        assert db.session.scalars(select(OrganizationMember).where(OrganizationMember.organization_id == acme["id"])
                                  ).all() == []  # fmt: skip


def test_organization_admins_manage_members_and_roles(
    app: Flask, client: FlaskClient, people: dict[str, Persona]
) -> None:
    alice, carol, dave, erin = people["alice"], people["carol"], people["dave"], people["erin"]
    acme = _create(client, alice, "acme")
    # alice makes dave an organisation admin; dave (a plain member of the deployment) takes it from there.
    added = client.post(f"{ORGS}/acme/members/{dave.id}", headers=alice.auth)
    assert added.status_code == 201 and added.json["roles"] == [] and added.json["organization_id"] == acme["id"]
    roles = client.put(f"{ORGS}/acme/members/dave/roles", json={"roles": ["organization-admin"]}, headers=alice.auth)
    assert roles.status_code == 200, roles.json
    assert roles.json["roles"] == [
        {"name": "organization-admin", "display_name": "Organization Admin", "organization_id": acme["id"]}
    ]
    assert client.post(f"{ORGS}/acme/members/carol", headers=dave.auth).status_code == 201
    made = client.put(
        f"{ORGS}/acme/members/carol/roles", json={"roles": ["organization-user-admin"]}, headers=dave.auth
    )
    assert made.status_code == 200, made.json
    # carol, a user admin of acme, adds erin, but makes or unmakes no admin.
    assert client.post(f"{ORGS}/acme/members/erin", headers=carol.auth).status_code == 201
    for role_list in (["organization-admin"], ["organization-auditor", "organization-admin"]):
        refused = client.put(f"{ORGS}/acme/members/erin/roles", json={"roles": role_list}, headers=carol.auth)
        assert refused.status_code == 403, refused.json
    assert client.delete(f"{ORGS}/acme/members/dave", headers=carol.auth).status_code == 403
    both = ["organization-template-admin", "organization-auditor"]
    given = client.put(f"{ORGS}/acme/members/erin/roles", json={"roles": both}, headers=carol.auth)
    assert [role["name"] for role in given.json["roles"]] == sorted(both, key=ORG_ROLES.index)
    # erin, a member, reads the members (by username, paged, searchable) and changes nothing.
    assert _member_names(client, "acme", erin) == ["alice", "carol", "dave", "erin"]
    page = client.get(f"{ORGS}/acme/members?limit=2&offset=1", headers=erin.auth)
    assert [m["username"] for m in page.json] == ["carol", "dave"] and page.headers["X-Total-Count"] == "4"
    assert _member_names(client, "acme", erin, "?q=DAV") == ["dave"]
    assert client.post(f"{ORGS}/acme/members/bob", headers=erin.auth).status_code == 403
    assert client.put(f"{ORGS}/acme/members/me/roles", json={"roles": []}, headers=erin.auth).status_code == 403

    # Removing erin takes her out of acme's groups too, and acme out of her sight.
    group = client.post(f"{ORGS}/acme/groups", json={"name": "ml"}, headers=alice.auth).json
    added_to_group = client.patch(f"/api/v2/groups/{group['id']}", json={"add_users": [erin.id]}, headers=alice.auth)
    assert added_to_group.status_code == 200, added_to_group.json
    assert client.delete(f"{ORGS}/acme/members/erin", headers=carol.auth).status_code == 204
    assert client.get(f"{ORGS}/acme", headers=erin.auth).status_code == 404
    assert [org["name"] for org in client.get(ORGS, headers=erin.auth).json] == ["default"]
    with app.app_context():
        assert db.session.scalars(select(GroupMember).where(GroupMember.user_id == erin.id)).all() == []
    assert client.delete(f"{ORGS}/acme/members/erin", headers=carol.auth).status_code == 404
    # An organisation admin may be removed by another.
    assert client.delete(f"{ORGS}/acme/members/dave", headers=alice.auth).status_code == 204


def test_bad_member_changes_are_clear_errors(client: FlaskClient, people: dict[str, Persona]) -> None:
    alice = people["alice"]
    _create(client, alice, "acme")
    assert client.post(f"{ORGS}/acme/members/carol", headers=alice.auth).status_code == 201
    again = client.post(f"{ORGS}/acme/members/carol", headers=alice.auth)
    assert again.status_code == 409 and "already a member" in again.json["message"]
    unknown = client.put(
        f"{ORGS}/acme/members/carol/roles", json={"roles": ["owner", "organization-admin"]}, headers=alice.auth
    )
    assert unknown.status_code == 400
    assert "'owner'" in unknown.json["message"] and all(role in unknown.json["message"] for role in ORG_ROLES)
    for body in ({"roles": "organization-admin"}, {}, {"roles": [1]}):
        reply = client.put(f"{ORGS}/acme/members/carol/roles", json=body, headers=alice.auth)
        assert reply.status_code == 400 and reply.is_json, body
    not_member = client.put(f"{ORGS}/acme/members/dave/roles", json={"roles": []}, headers=alice.auth)
    assert not_member.status_code == 404 and "dave is not a member of acme" in not_member.json["message"]
    assert client.post(f"{ORGS}/acme/members/nosuch", headers=alice.auth).status_code == 404
    assert client.post(f"{ORGS}/acme/members/prebuilds", headers=alice.auth).status_code == 404
    leaving_default = client.delete(f"{ORGS}/default/members/carol", headers=alice.auth)
    assert leaving_default.status_code == 400 and "Everyone belongs to default" in leaving_default.json["message"]


def test_people_see_their_own_organizations_and_admins_see_all(client: FlaskClient, people: dict[str, Persona]) -> None:
    alice, bob, carol, frank = people["alice"], people["bob"], people["carol"], people["frank"]
    _create(client, alice, "acme")
    _create(client, alice, "globex")
    assert client.post(f"{ORGS}/globex/members/carol", headers=alice.auth).status_code == 201
    assert [org["name"] for org in client.get(ORGS, headers=carol.auth).json] == ["default", "globex"]
    assert [org["name"] for org in client.get(ORGS, headers=bob.auth).json] == ["default"]
    assert [org["name"] for org in client.get(ORGS, headers=frank.auth).json] == ["default", "acme", "globex"]
    # Another organisation does not exist for a member of the deployment (a template admin included).
    for persona in (bob, carol):
        assert client.get(f"{ORGS}/acme", headers=persona.auth).status_code == 404
        assert client.get(f"{ORGS}/acme/members", headers=persona.auth).status_code == 404
        assert client.post(f"{ORGS}/acme/members/dave", headers=persona.auth).status_code == 404
    # A user admin manages members everywhere; only owners change organisations.
    assert client.post(f"{ORGS}/acme/members/dave", headers=frank.auth).status_code == 201
    made = client.put(f"{ORGS}/acme/members/dave/roles", json={"roles": ["organization-admin"]}, headers=frank.auth)
    assert made.status_code == 200
    dave = people["dave"]
    for method, path in (("POST", ORGS), ("PATCH", f"{ORGS}/acme"), ("DELETE", f"{ORGS}/acme")):
        for persona in (frank, dave):
            reply = client.open(path, method=method, json={"name": "x"}, headers=persona.auth)
            assert reply.status_code == 403 and "Only owners" in reply.json["message"], (method, path)


def test_template_and_group_names_are_unique_within_an_organization(
    app: Flask, client: FlaskClient, people: dict[str, Persona]
) -> None:
    alice, bob, carol = people["alice"], people["bob"], people["carol"]
    acme = _create(client, alice, "acme")
    in_acme = _template_in(client, people, "acme")
    # The default organisation may now have its own python.
    in_default = import_template(client, people, FakeDaemon(client), name="python")
    assert in_default["id"] != in_acme["id"]
    by_org = {
        org: client.get(f"{ORGS}/{org}/templates/python", headers=alice.auth) for org in ("acme", "default", acme["id"])
    }
    assert {org: reply.json["id"] for org, reply in by_org.items()} == {
        "acme": in_acme["id"], "default": in_default["id"], acme["id"]: in_acme["id"]
    }  # fmt: skip
    # Not in an organisation one does not belong to; and the error says where it looked.
    missing = client.get(f"{ORGS}/acme/templates/python", headers=carol.auth)
    assert missing.status_code == 404 and missing.json["message"] == "No template named 'python' in organisation acme."
    assert client.get(f"{ORGS}/default/templates/python", headers=carol.auth).json["id"] == in_default["id"]
    # A second python in one organisation: the database refuses it (both databases).
    with app.app_context():
        db.session.add(Template(name="python", organization_id=DEFAULT_ORGANIZATION_ID, created_by=bob.id))
        with pytest.raises(IntegrityError):
            db.session.flush()
        db.session.rollback()
    # Groups: each organisation may have its own ml, but not two.
    for org in ("default", "acme"):
        assert client.post(f"{ORGS}/{org}/groups", json={"name": "ml"}, headers=alice.auth).status_code == 201
    assert client.post(f"{ORGS}/acme/groups", json={"name": "ML"}, headers=alice.auth).status_code == 409
    found = {org: client.get(f"{ORGS}/{org}/groups/ml", headers=alice.auth).json["organization_id"]
             for org in ("default", "acme")}  # fmt: skip
    assert found == {"default": DEFAULT_ORGANIZATION_ID, "acme": acme["id"]}


def test_the_organizations_pages(app: Flask, client: FlaskClient, people: dict[str, Persona]) -> None:
    """alice creates acme on the page, adds carol and gives her a role there; carol sees acme and its members but
    no form; bad input is the form again with the field's error; alice deletes acme."""
    browser = app.test_client()
    sign_in(browser, "alice@example.com", people["alice"].password)
    assert 'href="/organizations"' in browser.get("/workspaces").get_data(as_text=True)
    bad = post_form(browser, "/organizations/create", {"name": "a b"}, token_from="/organizations")
    assert bad.status_code == 400 and "Use 1-32 letters" in bad.get_data(as_text=True)
    created = post_form(
        browser, "/organizations/create", {"name": "acme", "display_name": "Acme"}, token_from="/organizations"
    )
    assert created.status_code == 302 and created.headers["Location"].endswith("/organizations/acme")
    assert 'id="organization-acme"' in browser.get("/organizations").get_data(as_text=True)
    added = post_form(browser, "/organizations/acme/members", {"username": "carol"}, token_from="/organizations/acme")
    assert added.status_code == 302
    missing = post_form(
        browser, "/organizations/acme/members", {"username": "nosuch"}, token_from="/organizations/acme"
    )
    assert missing.status_code == 404 and "No such user." in missing.get_data(as_text=True)
    roles = post_form(
        browser,
        f"/organizations/acme/members/{people['carol'].id}/roles",
        {"roles": "organization-auditor"},
        token_from="/organizations/acme",
    )
    assert roles.status_code == 302
    page = browser.get("/organizations/acme").get_data(as_text=True)
    assert 'id="member-carol"' in page and 'value="organization-auditor" checked' in page

    carol = app.test_client()
    sign_in(carol, "carol@example.com", people["carol"].password)
    seen = carol.get("/organizations/acme").get_data(as_text=True)
    assert 'id="member-alice"' in seen and "add-member-form" not in seen and "edit-organization-form" not in seen
    assert carol.get("/organizations/acme").status_code == 200
    dave = app.test_client()
    sign_in(dave, "dave@example.com", people["dave"].password)
    assert dave.get("/organizations/acme").status_code == 404
    assert 'id="organization-acme"' not in dave.get("/organizations").get_data(as_text=True)

    renamed = post_form(browser, "/organizations/acme/edit", {"name": "acme-corp", "display_name": "Acme"},
                        token_from="/organizations/acme")  # fmt: skip
    assert renamed.status_code == 302 and renamed.headers["Location"].endswith("/organizations/acme-corp")
    deleted = post_form(browser, "/organizations/acme-corp/delete", {}, token_from="/organizations/acme-corp")
    assert deleted.status_code == 302
    assert client.get(f"{ORGS}/acme-corp", headers=people["alice"].auth).status_code == 404
    refused = post_form(browser, "/organizations/default/delete", {}, token_from="/organizations/default")
    assert refused.status_code == 302
    assert "default organisation cannot be deleted" in browser.get("/organizations/default").get_data(as_text=True)
