"""Groups as Coder's API has them: owners and user admins create, rename, restyle and delete groups and change
their members; the built-in Everyone group holds every member and cannot be changed; others see their own groups."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from app.core.extensions import db
from app.groups.models import Group
from tests.conftest import Persona
from tests.support.permissions import more_personas

pytestmark = pytest.mark.databases("sqlite", "postgresql")

GROUPS = "/api/v2/organizations/default/groups"


@pytest.fixture
def people(app: Flask, personas: dict[str, Persona]) -> dict[str, Persona]:
    return more_personas(app, personas)


def test_a_user_admin_creates_renames_fills_pages_and_deletes_a_group(
    client: FlaskClient, people: dict[str, Persona]
) -> None:
    frank = people["frank"]
    body = {"name": "ml", "display_name": "Machine learning", "avatar_url": "/icon/ml.svg", "quota_allowance": 5}
    created = client.post(GROUPS, json=body, headers=frank.auth)
    assert created.status_code == 201, created.json
    group = created.json
    assert (group["name"], group["display_name"], group["avatar_url"], group["quota_allowance"]) == (
        "ml", "Machine learning", "/icon/ml.svg", 5
    )  # fmt: skip
    assert group["source"] == "user" and group["organization_name"] == "default" and group["total_member_count"] == 0
    url = f"/api/v2/groups/{group['id']}"
    everyone = [people[name].id for name in ("carol", "dave", "erin")]
    added = client.patch(url, json={"add_users": everyone, "name": "ml-team"}, headers=frank.auth)
    assert added.status_code == 200, added.json
    assert added.json["name"] == "ml-team" and added.json["total_member_count"] == 3
    page = client.get(f"{url}?limit=2&offset=1", headers=frank.auth).json
    assert [member["username"] for member in page["members"]] == ["dave", "erin"]
    assert page["total_member_count"] == 3
    assert [m["username"] for m in client.get(f"{url}?q=car", headers=frank.auth).json["members"]] == ["carol"]
    removed = client.patch(url, json={"remove_users": [people["dave"].id]}, headers=frank.auth)
    assert [member["username"] for member in removed.json["members"]] == ["carol", "erin"]
    # By name, the organisation by id or name too.
    org_id = group["organization_id"]
    for org in ("default", org_id):
        by_name = client.get(f"/api/v2/organizations/{org}/groups/ml-team", headers=frank.auth)
        assert by_name.status_code == 200 and by_name.json["id"] == group["id"]
    listed = client.get(f"/api/v2/organizations/{org_id}/groups", headers=frank.auth)
    assert [(g["name"], g["total_member_count"]) for g in listed.json] == [("Everyone", 6), ("ml-team", 2)]
    assert [g["name"] for g in client.get(f"{GROUPS}?q=team", headers=frank.auth).json] == ["ml-team"]
    assert client.delete(url, headers=frank.auth).status_code == 200
    assert client.get(url, headers=frank.auth).status_code == 404


def test_everyone_holds_every_member_and_cannot_be_changed(client: FlaskClient, people: dict[str, Persona]) -> None:
    alice = people["alice"]
    everyone = client.get(GROUPS, headers=alice.auth).json[0]
    assert everyone["name"] == "Everyone" and everyone["id"] == everyone["organization_id"]
    url = f"/api/v2/groups/{everyone['id']}"
    members = client.get(url, headers=alice.auth).json
    assert [member["username"] for member in members["members"]] == sorted(people)
    for change in ({"name": "all"}, {"add_users": [people["carol"].id]}, {"remove_users": [people["carol"].id]}):
        reply = client.patch(url, json=change, headers=alice.auth)
        assert reply.status_code == 400 and "Everyone" in reply.json["message"], change
    assert client.delete(url, headers=alice.auth).status_code == 400
    # Its avatar and quota may change.
    assert client.patch(url, json={"quota_allowance": 3}, headers=alice.auth).json["quota_allowance"] == 3
    # A new person is in it at once.
    created = client.post("/api/v2/users", json={"username": "gina", "email": "gina@example.com",
                          "password": "correct-horse-battery", "roles": []}, headers=alice.auth)  # fmt: skip
    assert created.status_code == 201
    assert client.get(url, headers=alice.auth).json["total_member_count"] == len(people) + 1


def test_bad_group_input_is_refused_with_what_to_fix(
    app: Flask, client: FlaskClient, people: dict[str, Persona]
) -> None:
    alice = people["alice"]
    assert client.post(GROUPS, json={"name": "ml"}, headers=alice.auth).status_code == 201
    taken = client.post(GROUPS, json={"name": "ML"}, headers=alice.auth)
    assert taken.status_code == 409
    for body, field in (
        ({"name": "no spaces"}, "name"),
        ({"name": "everyone"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x", "avatar_url": "javascript:alert(1)"}, "avatar_url"),
        ({"name": "x", "quota_allowance": -1}, "quota_allowance"),
        ({"name": "x", "quota_allowance": "lots"}, "quota_allowance"),
    ):
        reply = client.post(GROUPS, json=body, headers=alice.auth)
        assert reply.status_code == 400, body
        assert [item["field"] for item in reply.json["validations"]] == [field], body
    group = client.get(f"{GROUPS}/ml", headers=alice.auth).json
    url = f"/api/v2/groups/{group['id']}"
    unknown = client.patch(url, json={"add_users": ["nobody"]}, headers=alice.auth)
    assert unknown.status_code == 400 and unknown.json["validations"][0]["field"] == "add_users"
    assert client.patch(url, json={"add_users": "carol"}, headers=alice.auth).status_code == 400
    assert client.get("/api/v2/organizations/nowhere/groups", headers=alice.auth).status_code == 404
    # A group the identity provider fills is not edited by hand.
    with app.app_context():
        db.session.execute(update(Group).where(Group.id == group["id"]).values(source="oidc"))
        db.session.commit()
    synced = client.patch(url, json={"add_users": [people["carol"].id]}, headers=alice.auth)
    assert synced.status_code == 409 and "identity provider" in synced.json["message"]


def test_only_owners_and_user_admins_manage_groups_and_members_see_their_own(
    client: FlaskClient, people: dict[str, Persona]
) -> None:
    alice, carol, dave = people["alice"], people["carol"], people["dave"]
    ml = client.post(GROUPS, json={"name": "ml"}, headers=alice.auth).json
    ops = client.post(GROUPS, json={"name": "ops"}, headers=alice.auth).json
    client.patch(f"/api/v2/groups/{ml['id']}", json={"add_users": [carol.id]}, headers=alice.auth)
    for name in ("bob", "carol"):
        headers = people[name].auth
        assert client.post(GROUPS, json={"name": "mine"}, headers=headers).status_code == 403
        assert client.patch(f"/api/v2/groups/{ml['id']}", json={"name": "x"}, headers=headers).status_code == 403
        assert client.delete(f"/api/v2/groups/{ml['id']}", headers=headers).status_code == 403
    assert [g["name"] for g in client.get(GROUPS, headers=carol.auth).json] == ["Everyone", "ml"]
    assert [g["name"] for g in client.get(GROUPS, headers=dave.auth).json] == ["Everyone"]
    assert client.get(f"/api/v2/groups/{ops['id']}", headers=carol.auth).status_code == 404
    assert client.get(f"/api/v2/groups/{ml['id']}", headers=carol.auth).status_code == 200
    # Template admins see every group: they grant templates to them.
    assert [g["name"] for g in client.get(GROUPS, headers=people["bob"].auth).json] == ["Everyone", "ml", "ops"]
