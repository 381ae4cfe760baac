"""API.md "Users and tokens", as a client would use it, including every way of getting it wrong."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.columns import utcnow
from app.core.errors import Conflict
from app.core.extensions import db
from app.users import services
from app.users.models import ApiKey, User
from tests.conftest import PASSWORD, Persona

pytestmark = pytest.mark.databases("sqlite")

FIRST = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}


def test_first_user_becomes_owner_and_only_once(client: FlaskClient) -> None:
    assert client.get("/api/v2/users/first").status_code == 404
    created = client.post("/api/v2/users/first", json=FIRST)
    assert created.status_code == 201
    assert created.json["roles"] == ["owner", "member"]
    assert not {"password", "password_hash", "session_nonce"} & set(created.json)
    assert client.get("/api/v2/users/first").status_code == 200
    again = client.post("/api/v2/users/first", json={**FIRST, "username": "mallory", "email": "m@example.com"})
    assert again.status_code == 409


def test_login_returns_a_working_session_token(client: FlaskClient) -> None:
    client.post("/api/v2/users/first", json=FIRST)
    login = client.post("/api/v2/users/login", json={"email": "ALICE@example.com", "password": PASSWORD})
    assert login.status_code == 201
    me = client.get("/api/v2/users/me", headers={"Authorization": f"Bearer {login.json['session_token']}"})
    assert me.status_code == 200
    assert me.json["email"] == "alice@example.com"
    assert me.json["status"] == "active" and me.json["login_type"] == "password"


def test_wrong_password_and_unknown_email_look_the_same(client: FlaskClient) -> None:
    client.post("/api/v2/users/first", json=FIRST)
    wrong_password = client.post("/api/v2/users/login", json={"email": FIRST["email"], "password": "nope-nope-nope"})
    unknown_email = client.post("/api/v2/users/login", json={"email": "who@example.com", "password": PASSWORD})
    assert wrong_password.status_code == unknown_email.status_code == 401
    assert wrong_password.json == unknown_email.json == {"message": "Incorrect email or password."}


def test_repeated_failed_logins_are_rate_limited(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for _ in range(10):
        assert (
            client.post("/api/v2/users/login", json={"email": "carol@example.com", "password": "x" * 9}).status_code
            == 401
        )
    limited = client.post("/api/v2/users/login", json={"email": "carol@example.com", "password": PASSWORD})
    assert limited.status_code == 429
    assert "Too many failed sign-in attempts" in limited.json["message"]
    # Another person is not locked out by carol's attacker.
    assert (
        client.post("/api/v2/users/login", json={"email": "dave@example.com", "password": PASSWORD}).status_code == 201
    )


def test_malformed_and_incomplete_bodies_are_400_with_validations(client: FlaskClient) -> None:
    garbage = client.post("/api/v2/users/first", data="{not json", content_type="application/json")
    assert garbage.status_code == 400
    assert garbage.json["message"].startswith("The body is not valid JSON")
    assert client.post("/api/v2/users/first", json=["a", "list"]).status_code == 400
    missing = client.post("/api/v2/users/first", json={"username": "alice"})
    assert missing.status_code == 400
    assert {item["field"] for item in missing.json["validations"]} == {"email", "password"}
    bad = client.post("/api/v2/users/first", json={"username": "-bad-", "email": "nope", "password": "short"})
    assert {item["field"] for item in bad.json["validations"]} == {"username", "email", "password"}
    wrong_type = client.post("/api/v2/users/first", json={"username": 5, "email": [], "password": None})
    assert wrong_type.status_code == 400


def test_oversize_body_is_413(client: FlaskClient) -> None:
    response = client.post("/api/v2/users/first", json={**FIRST, "username": "a" * (2 * 1024 * 1024)})
    assert response.status_code == 413
    assert response.json["message"] == "The request body is too large."


def test_owner_creates_lists_and_updates_users(client: FlaskClient, personas: dict[str, Persona]) -> None:
    alice = personas["alice"].auth
    created = client.post(
        "/api/v2/users",
        json={
            "username": "erin",
            "email": "erin@example.com",
            "password": PASSWORD,
            "roles": ["template-admin"],
        },
        headers=alice,
    )
    assert created.status_code == 201
    assert created.json["roles"] == ["template-admin", "member"]
    names = [user["username"] for user in client.get("/api/v2/users", headers=alice).json]
    assert names == ["alice", "bob", "carol", "dave", "erin"]
    patched = client.patch(f"/api/v2/users/{created.json['id']}", json={"roles": ["owner"]}, headers=alice)
    assert patched.json["roles"] == ["owner", "member"]
    assert (
        client.patch(f"/api/v2/users/{created.json['id']}", json={"roles": ["wizard"]}, headers=alice).status_code
        == 400
    )
    assert client.patch(f"/api/v2/users/{created.json['id']}", json={}, headers=alice).status_code == 400
    assert client.patch("/api/v2/users/no-such-id", json={"status": "suspended"}, headers=alice).status_code == 404


def test_duplicate_username_or_email_is_409(client: FlaskClient, personas: dict[str, Persona]) -> None:
    alice = personas["alice"].auth
    for body in (
        {"username": "CAROL", "email": "new@example.com", "password": PASSWORD},
        {"username": "newbie", "email": "carol@example.com", "password": PASSWORD},
    ):
        response = client.post("/api/v2/users", json=body, headers=alice)
        assert response.status_code == 409, body
        assert response.json["validations"]


def test_owner_cannot_lock_themselves_out(client: FlaskClient, personas: dict[str, Persona]) -> None:
    alice = personas["alice"]
    assert (
        client.patch(f"/api/v2/users/{alice.id}", json={"status": "suspended"}, headers=alice.auth).status_code == 403
    )
    assert client.patch(f"/api/v2/users/{alice.id}", json={"roles": []}, headers=alice.auth).status_code == 403


def test_the_last_active_owner_cannot_be_demoted_or_suspended(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """update_user itself keeps an active owner, whoever calls it: the routes' owner guard is not the only line."""
    alice = personas["alice"]

    def refused(**change: object) -> None:
        with app.app_context():
            actor = db.session.get(User, personas["bob"].id)  # any caller other than alice: a script, a job
            assert actor is not None
            with pytest.raises(Conflict, match="alice is the last active owner") as error:
                services.update_user(actor, alice.id, **change)  # type: ignore[arg-type]
            assert error.value.status == 409
        assert client.get("/api/v2/users/me", headers=alice.auth).json["roles"] == ["owner", "member"]

    refused(roles=["template-admin"])
    refused(status="suspended")
    erin = {"username": "erin", "email": "erin@example.com", "password": PASSWORD, "roles": ["owner"]}
    erin_id = client.post("/api/v2/users", json=erin, headers=alice.auth).json["id"]
    assert client.patch(f"/api/v2/users/{erin_id}", json={"status": "suspended"}, headers=alice.auth).status_code == 200
    refused(roles=[])  # a suspended owner does not count
    assert client.patch(f"/api/v2/users/{erin_id}", json={"status": "active"}, headers=alice.auth).status_code == 200
    login = client.post("/api/v2/users/login", json={"email": "erin@example.com", "password": PASSWORD})
    erin_auth = {"Authorization": f"Bearer {login.json['session_token']}"}
    assert client.patch(f"/api/v2/users/{alice.id}", json={"roles": []}, headers=erin_auth).status_code == 200


def test_members_and_template_admins_cannot_manage_users(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for name in ("bob", "carol"):
        headers = personas[name].auth
        assert client.get("/api/v2/users", headers=headers).status_code == 403
        body = {"username": "x", "email": "x@example.com", "password": PASSWORD}
        assert client.post("/api/v2/users", json=body, headers=headers).status_code == 403
        target = personas["dave"].id
        assert client.patch(f"/api/v2/users/{target}", json={"roles": ["owner"]}, headers=headers).status_code == 403
        assert client.get("/api/v2/users/me", headers=headers).status_code == 200


def test_suspended_users_token_is_refused_and_login_denied(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"]
    assert client.get("/api/v2/users/me", headers=carol.auth).status_code == 200
    client.patch(f"/api/v2/users/{carol.id}", json={"status": "suspended"}, headers=personas["alice"].auth)
    assert client.get("/api/v2/users/me", headers=carol.auth).status_code == 401
    login = client.post("/api/v2/users/login", json={"email": carol.email, "password": PASSWORD})
    assert login.status_code == 401
    assert "suspended" in login.json["message"]
    client.patch(f"/api/v2/users/{carol.id}", json={"status": "active"}, headers=personas["alice"].auth)
    assert client.post("/api/v2/users/login", json={"email": carol.email, "password": PASSWORD}).status_code == 201


def test_api_token_secret_is_shown_once_and_stored_hashed(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol = personas["carol"].auth
    created = client.post("/api/v2/users/me/tokens", json={"name": "ci", "lifetime_seconds": 3600}, headers=carol)
    assert created.status_code == 201
    secret = created.json["token"]
    assert set(created.json) == {"id", "name", "token", "expires_at"}
    listed = client.get("/api/v2/users/me/tokens", headers=carol).json
    assert [token["name"] for token in listed] == ["ci"]
    assert secret.split("-", 1)[1] not in str(listed)
    with app.app_context():
        row = db.session.scalar(select(ApiKey).where(ApiKey.id == created.json["id"]))
        assert row is not None and secret.split("-", 1)[1] not in (row.secret_hash, row.lookup_id)
        assert row.secret_hash == hashlib.sha256(secret.split("-", 1)[1].encode()).hexdigest()
    assert client.get("/api/v2/users/me", headers={"Authorization": f"Bearer {secret}"}).json["username"] == "carol"


def test_tokens_are_revocable_and_expire(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    dave = personas["dave"].auth
    created = client.post("/api/v2/users/me/tokens", json={"name": "laptop"}, headers=dave).json
    bearer = {"Authorization": f"Bearer {created['token']}"}
    assert client.post("/api/v2/users/me/tokens", json={"name": "laptop"}, headers=dave).status_code == 409
    # Another user cannot revoke dave's token, and does not learn that it exists.
    assert client.delete(f"/api/v2/users/me/tokens/{created['id']}", headers=personas["carol"].auth).status_code == 404
    assert client.delete(f"/api/v2/users/me/tokens/{created['id']}", headers=dave).status_code == 204
    assert client.get("/api/v2/users/me", headers=bearer).status_code == 401

    expiring = client.post("/api/v2/users/me/tokens", json={"name": "short"}, headers=dave).json
    with app.app_context():
        row = db.session.get(ApiKey, expiring["id"])
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
        db.session.commit()
    assert client.get("/api/v2/users/me", headers={"Authorization": f"Bearer {expiring['token']}"}).status_code == 401


def test_token_input_is_validated(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"].auth
    assert client.post("/api/v2/users/me/tokens", json={"name": ""}, headers=carol).status_code == 400
    assert (
        client.post("/api/v2/users/me/tokens", json={"name": "x", "lifetime_seconds": "1d"}, headers=carol).status_code
        == 400
    )
    too_long = client.post("/api/v2/users/me/tokens", json={"name": "x", "lifetime_seconds": 10**12}, headers=carol)
    assert too_long.status_code == 400


def test_bad_credentials_are_401_json(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for header in (
        "Bearer nonsense",
        "Bearer abc-def",
        "Basic dXNlcjpwYXNz",
        f"Bearer {personas['carol'].token}x",
    ):
        response = client.get("/api/v2/users/me", headers={"Authorization": header})
        assert response.status_code == 401
        assert response.is_json and response.json["message"]


def test_logout_revokes_the_session_token(client: FlaskClient, personas: dict[str, Persona]) -> None:
    carol = personas["carol"].auth
    assert client.post("/api/v2/users/logout", headers=carol).status_code == 204
    assert client.get("/api/v2/users/me", headers=carol).status_code == 401


def test_unknown_api_path_is_json_404(client: FlaskClient) -> None:
    response = client.get("/api/v2/nothing-here")
    assert response.status_code == 404 and response.is_json
