"""The cast and the setting of permission tests: two more personas (erin, who administers one template through its
access list, and frank, a user admin) and a template that only the group ``ml`` may use."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.users import services
from app.users.tokens import issue_session_token
from tests.conftest import PASSWORD, Persona, _hash_once
from tests.support.daemon import FakeDaemon, import_template

ROLES = {"erin": [], "frank": ["user-admin"]}


def more_personas(app: Flask, personas: dict[str, Persona]) -> dict[str, Persona]:
    """``personas`` with erin (a member) and frank (a user admin) added."""
    people = dict(personas)
    with app.app_context(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "generate_password_hash", _hash_once)
        for name, roles in ROLES.items():
            user = services.create_user(name, f"{name}@example.com", PASSWORD, roles)
            people[name] = Persona(user.id, name, user.email, PASSWORD, issue_session_token(user, 3600))
    return people


def restricted_template(client: FlaskClient, people: dict[str, Persona], name: str = "gpu") -> dict[str, Any]:
    """A template that Everyone may no longer use: the group ``ml`` (dave) may use it and erin administers it.
    Returns the template, with ``group`` (the ml group's JSON) and ``daemon`` (the stand-in that imported it)."""
    daemon = FakeDaemon(client)
    template = import_template(client, people, daemon, name=name)
    alice = people["alice"]
    group = client.post("/api/v2/organizations/default/groups", json={"name": "ml"}, headers=alice.auth)
    assert group.status_code == 201, group.json
    added = client.patch(
        f"/api/v2/groups/{group.json['id']}", json={"add_users": [people["dave"].id]}, headers=alice.auth
    )
    assert added.status_code == 200, added.json
    everyone = group.json["organization_id"]
    body = {"group_perms": {everyone: "", group.json["id"]: "use"}, "user_perms": {people["erin"].id: "admin"}}
    changed = client.patch(f"/api/v2/templates/{template['id']}/acl", json=body, headers=alice.auth)
    assert changed.status_code == 200, changed.json
    return {**template, "group": group.json, "daemon": daemon}
