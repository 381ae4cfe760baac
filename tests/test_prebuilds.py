"""Prebuilt workspaces, in-process: the ``prebuilds`` system user (issue 42 part 1)."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from app.users.models import PREBUILDS_USER_ID, PREBUILDS_USERNAME
from tests.conftest import PASSWORD, Persona

pytestmark = pytest.mark.databases("sqlite")


def test_the_prebuilds_user_is_nobody_to_sign_in_as_or_to_list(client: FlaskClient) -> None:
    # An empty deployment (but for the system user) still asks for its first person, who becomes the owner.
    assert client.get("/api/v2/users/first").status_code == 404
    first = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
    assert client.post("/api/v2/users/first", json=first).status_code == 201
    token = client.post("/api/v2/users/login", json={"email": first["email"], "password": PASSWORD}).get_json()
    alice = {"Coder-Session-Token": token["session_token"]}
    for identifier in (PREBUILDS_USERNAME, "prebuilds@system.slipway.invalid"):
        refused = client.post("/api/v2/users/login", json={"email": identifier, "password": ""})
        assert refused.status_code in (400, 401)
    listed = client.get("/api/v2/users", headers=alice).get_json()
    assert [user["username"] for user in listed] == ["alice"]
    # Still there for whoever names it (GET /api/v2/workspaces?q=owner:prebuilds resolves it).
    assert client.get(f"/api/v2/users/{PREBUILDS_USER_ID}", headers=alice).get_json()["username"] == PREBUILDS_USERNAME


def test_members_do_not_see_the_prebuilds_user(client: FlaskClient, personas: dict[str, Persona]) -> None:
    listed = client.get("/api/v2/users?limit=100", headers=personas["carol"].auth)
    if listed.status_code == 200:
        assert PREBUILDS_USERNAME not in [user["username"] for user in listed.get_json()]
    else:
        assert listed.status_code == 403
