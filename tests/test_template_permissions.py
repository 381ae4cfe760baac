"""Who may use which template: the access-list rule (people, groups, Everyone, template-level admins) through every
way in (list, search, by id, by name, create, start), the ACL API, and the effective-permissions answers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.permissions import more_personas, restricted_template
from tests.support.queries import counted

pytestmark = pytest.mark.databases("sqlite", "postgresql")

REGION = [{"name": "region", "value": "eu"}]


@pytest.fixture
def people(app: Flask, personas: dict[str, Persona]) -> dict[str, Persona]:
    return more_personas(app, personas)


@pytest.fixture
def gpu(client: FlaskClient, people: dict[str, Persona]) -> dict[str, Any]:
    return restricted_template(client, people)


def names(client: FlaskClient, persona: Persona, query: str = "") -> list[str]:
    reply = client.get(f"/api/v2/templates{query}", headers=persona.auth)
    assert reply.status_code == 200, reply.json
    return [template["name"] for template in reply.json]


def create(client: FlaskClient, persona: Persona, template_id: str, name: str = "ws") -> Any:
    body = {"template_id": template_id, "name": name, "rich_parameter_values": REGION}
    return client.post("/api/v2/workspaces", json=body, headers=persona.auth)


def finish(daemon: FakeDaemon, job_id: str) -> None:
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204


def test_a_member_outside_the_group_cannot_see_or_use_the_template_and_joining_makes_it_appear(
    client: FlaskClient, people: dict[str, Persona], gpu: dict[str, Any]
) -> None:
    carol, dave, alice = people["carol"], people["dave"], people["alice"]
    assert names(client, carol) == []
    assert names(client, carol, "?q=gpu") == [] and names(client, carol, "?name=gpu") == []
    assert client.get(f"/api/v2/templates/{gpu['id']}", headers=carol.auth).status_code == 404
    assert client.get(f"/api/v2/templates/{gpu['id']}/versions", headers=carol.auth).status_code == 404
    version = gpu["active_version_id"]
    assert client.get(f"/api/v2/templateversions/{version}/parameters", headers=carol.auth).status_code == 404
    refused = create(client, carol, gpu["id"])
    assert refused.status_code == 404, refused.json
    # The group's member sees it, and the list's total counts only what they may see.
    listed = client.get("/api/v2/templates", headers=dave.auth)
    assert [item["name"] for item in listed.json] == ["gpu"] and listed.headers["X-Total-Count"] == "1"
    assert create(client, dave, gpu["id"]).status_code == 201
    # Joining the group makes it appear.
    joined = client.patch(f"/api/v2/groups/{gpu['group']['id']}", json={"add_users": [carol.id]}, headers=alice.auth)
    assert joined.status_code == 200
    assert names(client, carol) == ["gpu"]
    assert create(client, carol, gpu["id"]).status_code == 201


def test_starting_a_workspace_whose_template_was_taken_away_says_why_and_whom_to_ask(
    client: FlaskClient, people: dict[str, Persona], gpu: dict[str, Any]
) -> None:
    dave, alice = people["dave"], people["alice"]
    workspace = create(client, dave, gpu["id"]).json
    finish(gpu["daemon"], workspace["latest_build"]["job"]["id"])
    stop = client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=dave.auth)
    assert stop.status_code == 201
    finish(gpu["daemon"], stop.json["job"]["id"])
    left = client.patch(f"/api/v2/groups/{gpu['group']['id']}", json={"remove_users": [dave.id]}, headers=alice.auth)
    assert left.status_code == 200
    start = client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "start"}, headers=dave.auth)
    assert start.status_code == 403
    assert "no longer have permission to use template gpu" in start.json["message"]
    assert "erin" in start.json["message"], "the template's admins are named"
    # Their workspace is still theirs to see and delete.
    assert client.get(f"/api/v2/workspaces/{workspace['id']}", headers=dave.auth).status_code == 200
    delete = {"transition": "delete"}
    assert (
        client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json=delete, headers=dave.auth).status_code == 201
    )


def test_a_template_level_admin_manages_that_template_alone(
    client: FlaskClient, people: dict[str, Persona], gpu: dict[str, Any]
) -> None:
    erin, dave, bob = people["erin"], people["dave"], people["bob"]
    other = import_template(client, people, FakeDaemon(client, name="d2"), name="other")
    assert names(client, erin) == ["gpu", "other"], "Everyone may use the other template"
    # Settings, the access list and versions of gpu; nothing of the other template.
    settings = client.patch(f"/api/v2/templates/{gpu['id']}", json={"description": "GPUs"}, headers=erin.auth)
    assert settings.status_code == 200, settings.json
    assert (
        client.patch(f"/api/v2/templates/{other['id']}", json={"description": "x"}, headers=erin.auth).status_code
        == 403
    )
    assert client.get(f"/api/v2/templates/{gpu['id']}/acl", headers=erin.auth).status_code == 200
    assert client.get(f"/api/v2/templates/{other['id']}/acl", headers=erin.auth).status_code == 403
    assert client.get(f"/api/v2/templateversions/{gpu['active_version_id']}/logs", headers=erin.auth).status_code == 200
    # They push a new version of gpu, but make no new template.
    upload = client.post("/api/v2/files", data=b"x" * 10, headers={**erin.auth, "Content-Type": "application/x-tar"})
    assert upload.status_code in (201, 400), upload.json  # past the guard: the archive itself is judged
    create_template = {"name": "mine", "version_id": gpu["active_version_id"]}
    assert client.post("/api/v2/templates", json=create_template, headers=erin.auth).status_code == 403
    # They see and build the workspaces of gpu, not the others'.
    workspace = create(client, dave, gpu["id"]).json
    finish(gpu["daemon"], workspace["latest_build"]["job"]["id"])
    seen = client.get("/api/v2/workspaces", headers=erin.auth).json
    assert [item["id"] for item in seen] == [workspace["id"]]
    stop = client.post(f"/api/v2/workspaces/{workspace['id']}/builds", json={"transition": "stop"}, headers=erin.auth)
    assert stop.status_code == 201, stop.json
    # A member who may only use it does none of that.
    assert (
        client.patch(f"/api/v2/templates/{gpu['id']}", json={"description": "x"}, headers=dave.auth).status_code == 403
    )
    assert client.get(f"/api/v2/templates/{gpu['id']}/acl", headers=dave.auth).status_code == 403
    assert bob.id  # the site template admin manages every template (covered by the route-guard table)


def test_new_templates_let_everyone_use_them_unless_the_deployment_says_otherwise(
    app: Flask, client: FlaskClient, people: dict[str, Persona]
) -> None:
    first = import_template(client, people, FakeDaemon(client), name="open")
    acl = client.get(f"/api/v2/templates/{first['id']}/acl", headers=people["bob"].auth).json
    assert [(group["name"], group["role"]) for group in acl["group"]] == [("Everyone", "use")]
    assert acl["users"] == []
    settings = app.config["SLIPWAY_SETTINGS"]
    app.config["SLIPWAY_SETTINGS"] = dataclasses.replace(settings, new_templates_for_everyone=False)
    closed = import_template(client, people, FakeDaemon(client, name="d2"), name="closed")
    assert client.get(f"/api/v2/templates/{closed['id']}/acl", headers=people["bob"].auth).json["group"] == []
    assert names(client, people["carol"]) == ["open"]


def test_the_access_list_api_validates_every_entry_and_lists_who_can_be_added(
    client: FlaskClient, people: dict[str, Persona], gpu: dict[str, Any]
) -> None:
    alice, carol = people["alice"], people["carol"]
    url = f"/api/v2/templates/{gpu['id']}/acl"
    acl = client.get(url, headers=alice.auth).json
    assert [(user["username"], user["role"]) for user in acl["users"]] == [("erin", "admin")]
    assert [(group["name"], group["role"], group["total_member_count"]) for group in acl["group"]] == [("ml", "use", 1)]
    bad = {"user_perms": {carol.id: "owner", "nobody": "use"}, "group_perms": {"nogroup": "admin"}}
    reply = client.patch(url, json=bad, headers=alice.auth)
    assert reply.status_code == 400
    fields = {item["field"] for item in reply.json["validations"]}
    assert fields == {f"user_perms.{carol.id}", "user_perms.nobody", "group_perms.nogroup"}
    assert client.patch(url, json={"user_perms": ["x"]}, headers=alice.auth).status_code == 400
    assert client.get(url, headers=alice.auth).json == acl, "nothing changed"
    # Carol gets use; erin's entry goes.
    changed = client.patch(url, json={"user_perms": {carol.id: "use", people["erin"].id: ""}}, headers=alice.auth)
    assert changed.status_code == 200
    assert [(user["username"], user["role"]) for user in changed.json["users"]] == [("carol", "use")]
    assert names(client, carol) == ["gpu"]
    available = client.get(f"{url}/available?q=da", headers=alice.auth).json
    assert [user["username"] for user in available["users"]] == ["dave"]
    everyone = client.get(f"{url}/available", headers=alice.auth).json["groups"]
    assert [group["name"] for group in everyone] == ["Everyone", "ml"]
    assert everyone[0]["id"] == everyone[0]["organization_id"]


def test_effective_permissions_answer_as_the_routes_decide(
    client: FlaskClient, people: dict[str, Persona], gpu: dict[str, Any]
) -> None:
    checks = {
        "use": {"object": {"resource_type": "template", "resource_id": gpu["id"]}, "action": "use"},
        "update": {"object": {"resource_type": "template", "resource_id": gpu["id"]}, "action": "update"},
        "create_template": {"object": {"resource_type": "template"}, "action": "create"},
        "manage_groups": {"object": {"resource_type": "group"}, "action": "create"},
    }
    expected = {
        "alice": (True, True, True, True),
        "bob": (True, True, True, False),
        "carol": (False, False, False, False),
        "dave": (True, False, False, False),
        "erin": (True, True, False, False),
        "frank": (False, False, False, True),
    }
    for name, answers in expected.items():
        reply = client.post("/api/v2/authcheck", json={"checks": checks}, headers=people[name].auth)
        assert reply.status_code == 200, reply.json
        assert tuple(reply.json[key] for key in checks) == answers, name
    mine = client.get("/api/v2/users/me/permissions?template=gpu", headers=people["erin"].auth).json
    assert mine["template"] == {"id": gpu["id"], "name": "gpu", "role": "admin", "use": True, "admin": True}
    assert client.get("/api/v2/users/me/permissions?template=gpu", headers=people["carol"].auth).status_code == 404
    theirs = client.get(f"/api/v2/users/{people['dave'].id}/permissions?template=gpu", headers=people["frank"].auth)
    assert theirs.status_code == 404, "frank may not use gpu himself"
    theirs = client.get(f"/api/v2/users/dave/permissions?template={gpu['id']}", headers=people["alice"].auth)
    assert theirs.json["template"]["role"] == "use"
    assert client.get("/api/v2/users/dave/permissions", headers=people["carol"].auth).status_code == 403
    moon = {"x": {"object": {"resource_type": "moon"}, "action": "read"}}
    bad = client.post("/api/v2/authcheck", json={"checks": moon}, headers=people["carol"].auth)
    assert bad.status_code == 400


def test_listing_templates_costs_the_same_statements_whatever_the_groups_and_entries(
    app: Flask, client: FlaskClient, people: dict[str, Persona], gpu: dict[str, Any]
) -> None:
    dave, alice = people["dave"], people["alice"]

    def statements() -> int:
        with counted(app) as seen:
            assert client.get("/api/v2/templates", headers=dave.auth).status_code == 200
        return len(seen)

    statements()  # the first request of a token also records its use
    before = statements()
    for number in range(8):
        group = client.post("/api/v2/organizations/default/groups", json={"name": f"g{number}"}, headers=alice.auth)
        client.patch(f"/api/v2/groups/{group.json['id']}", json={"add_users": [dave.id]}, headers=alice.auth)
        client.patch(f"/api/v2/templates/{gpu['id']}/acl", json={"group_perms": {group.json["id"]: "use"}},
                     headers=alice.auth)  # fmt: skip
    assert statements() == before <= 4
