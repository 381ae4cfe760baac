"""The dashboard as a person uses it: first-user setup, sign-in, users admin, account and tokens."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from app.core.columns import utcnow
from app.core.extensions import db
from app.users.models import BrowserSession, User
from tests.conftest import PASSWORD, Persona
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")


def test_first_visit_leads_to_setup_and_creates_the_owner(client: FlaskClient) -> None:
    assert "/login" in client.get("/").headers["Location"]
    assert "/login" in client.get("/workspaces").headers["Location"]
    assert client.get("/login").headers["Location"].endswith("/setup")
    page = client.get("/setup").get_data(as_text=True)
    assert "Create the first user" in page and "owner" in page
    response = post_form(client, "/setup", {"username": "alice", "email": "alice@example.com", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/").headers["Location"].endswith("/workspaces")
    home = client.get("/workspaces").get_data(as_text=True)
    assert "Welcome, alice" in home and "Users" in home
    # Once a user exists the setup page is gone for good.
    assert client.get("/setup").headers["Location"].endswith("/login")


def test_setup_shows_field_errors_and_keeps_input(client: FlaskClient) -> None:
    response = post_form(client, "/setup", {"username": "al ice", "email": "alice@example.com", "password": "short"})
    page = response.get_data(as_text=True)
    assert response.status_code == 400
    assert "letters, digits and single hyphens" in page and "at least 8 characters" in page
    assert 'value="alice@example.com"' in page


def test_form_post_without_csrf_token_is_refused(client: FlaskClient, personas: dict[str, Persona]) -> None:
    response = client.post("/login", data={"email": "alice@example.com", "password": PASSWORD})
    assert response.status_code == 400
    assert "The form has expired" in response.get_data(as_text=True)
    sign_in(client, "alice@example.com", PASSWORD)
    forged = client.post("/users", data={"username": "mallory", "email": "m@example.com", "password": PASSWORD})
    assert forged.status_code == 400


def test_sign_in_and_out(client: FlaskClient, personas: dict[str, Persona]) -> None:
    wrong = post_form(client, "/login", {"email": "carol@example.com", "password": "wrong-password"})
    assert wrong.status_code == 401
    assert "Incorrect email or password." in wrong.get_data(as_text=True)
    sign_in(client, "carol@example.com", PASSWORD)
    page = client.get("/workspaces").get_data(as_text=True)
    assert "carol" in page and ">Users<" not in page  # members see no Users tab
    assert post_form(client, "/logout", {}, token_from="/workspaces").status_code == 302
    assert "/login" in client.get("/workspaces").headers["Location"]


def test_login_redirects_only_to_local_paths(client: FlaskClient, personas: dict[str, Persona]) -> None:
    token = csrf_token(client, "/login")
    response = client.post(
        "/login?next=https://evil.example/",
        data={"email": "carol@example.com", "password": PASSWORD, "csrf_token": token},
    )
    assert response.headers["Location"] == "/workspaces"


def test_page_sign_in_is_rate_limited(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for _ in range(10):
        post_form(client, "/login", {"email": "dave@example.com", "password": "wrong-password"})
    response = post_form(client, "/login", {"email": "dave@example.com", "password": PASSWORD})
    assert response.status_code == 429
    assert "Too many failed sign-in attempts" in response.get_data(as_text=True)


def test_owner_manages_users_on_the_users_page(client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    created = post_form(
        client,
        "/users",
        {"username": "erin", "email": "erin@example.com", "password": PASSWORD, "role": "template-admin"},
    )
    assert created.status_code == 302
    page = client.get("/users").get_data(as_text=True)
    assert "erin" in page and "Created erin" in page
    duplicate = post_form(client, "/users", {"username": "erin", "email": "e2@example.com", "password": PASSWORD})
    assert duplicate.status_code == 409 and "This username is taken." in duplicate.get_data(as_text=True)


def _user_status(app: Flask, personas: dict[str, Persona], person: str) -> tuple[list[str], str]:
    reply = app.test_client().get(f"/api/v2/users/{personas[person].id}", headers=personas["alice"].auth)
    return list(reply.json["roles"]), str(reply.json["status"])


def test_role_change_asks_first_then_says_what_happened(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    carol = f"/users/{personas['carol'].id}"
    users = client.get("/users").get_data(as_text=True)
    assert f'action="{carol}"' in users and "hx-post" not in users.split(f'id="user-{personas["carol"].id}"')[1][:600]
    asked = post_form(client, carol, {"role": "owner"}, token_from="/users")
    page = asked.get_data(as_text=True)
    assert asked.status_code == 200
    assert "Make carol an owner?" in page and 'name="confirmed" value="yes"' in page and 'name="csrf_token"' in page
    assert _user_status(app, personas, "carol") == (["member"], "active")  # asking changes nothing

    done = post_form(client, carol, {"role": "owner", "confirmed": "yes"}, token_from="/users")
    assert done.status_code == 302 and done.headers["Location"] == "/users"
    assert "carol is now an owner." in client.get("/users").get_data(as_text=True)
    assert _user_status(app, personas, "carol") == (["owner", "member"], "active")
    back = post_form(client, carol, {"role": "template-admin", "confirmed": "yes"}, token_from="/users")
    assert back.status_code == 302
    assert "carol is now a template admin." in client.get("/users").get_data(as_text=True)

    same = post_form(client, carol, {"role": "template-admin"}, token_from="/users")
    assert same.status_code == 200 and "carol is already a template admin" in same.get_data(as_text=True)
    for junk in ({"role": "root"}, {"status": "gone"}, {}):
        refused = post_form(client, carol, junk, token_from="/users")
        assert refused.status_code == 400, junk
        assert "Nothing was changed." in refused.get_data(as_text=True)
    assert post_form(client, carol, {"role": "root", "confirmed": "yes"}, token_from="/users").status_code == 400
    assert post_form(client, "/users/no-such-user", {"role": "owner"}, token_from="/users").status_code == 404
    # What the service refuses is said on the confirmation, before anyone confirms.
    own = post_form(client, f"/users/{personas['alice'].id}", {"role": "member"}, token_from="/users")
    assert own.status_code == 403 and "You cannot remove your own owner role" in own.get_data(as_text=True)
    assert _user_status(app, personas, "carol") == (["template-admin", "member"], "active")


def test_suspension_asks_first_then_says_what_happened(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    dave = f"/users/{personas['dave'].id}"
    asked = post_form(client, dave, {"status": "suspended"}, token_from="/users")
    assert asked.status_code == 200 and "Suspend dave?" in asked.get_data(as_text=True)
    assert _user_status(app, personas, "dave")[1] == "active"
    done = post_form(client, dave, {"status": "suspended", "confirmed": "yes"}, token_from="/users")
    assert done.status_code == 302
    users = client.get("/users").get_data(as_text=True)
    assert "dave was suspended." in users and "Activate…" in users
    assert _user_status(app, personas, "dave")[1] == "suspended"
    assert "Activate dave?" in post_form(client, dave, {"status": "active"}, token_from="/users").get_data(as_text=True)
    assert post_form(client, dave, {"status": "active", "confirmed": "yes"}, token_from="/users").status_code == 302
    assert "dave was activated." in client.get("/users").get_data(as_text=True)
    assert _user_status(app, personas, "dave")[1] == "active"
    itself = post_form(client, f"/users/{personas['alice'].id}", {"status": "suspended"}, token_from="/users")
    assert itself.status_code == 403 and "You cannot suspend yourself." in itself.get_data(as_text=True)
    # Without the CSRF token nothing is asked or changed.
    assert client.post(dave, data={"status": "suspended", "confirmed": "yes"}).status_code == 400
    assert _user_status(app, personas, "dave")[1] == "active"


def test_members_and_template_admins_cannot_open_users_page(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for email in ("bob@example.com", "carol@example.com"):
        client.get("/")  # fresh page load
        sign_in(client, email, PASSWORD)
        assert client.get("/users").status_code == 403
        token = csrf_token(client, "/account")
        for data in ({"status": "suspended"}, {"status": "suspended", "confirmed": "yes"}, {"role": "owner"}):
            response = client.post(f"/users/{personas['dave'].id}", data={**data, "csrf_token": token})
            assert response.status_code == 403, data
        post_form(client, "/logout", {}, token_from="/account")


def test_suspension_ends_the_browser_session(app: Flask, personas: dict[str, Persona]) -> None:
    carol, alice = app.test_client(), app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    assert carol.get("/workspaces").status_code == 200
    sign_in(alice, "alice@example.com", PASSWORD)
    token = csrf_token(alice, "/users")
    data = {"status": "suspended", "confirmed": "yes", "csrf_token": token}
    assert alice.post(f"/users/{personas['carol'].id}", data=data).status_code == 302
    assert "/login" in carol.get("/workspaces").headers["Location"]


def test_password_change_ends_other_sessions_but_keeps_this_one(app: Flask, personas: dict[str, Persona]) -> None:
    here, elsewhere = app.test_client(), app.test_client()
    sign_in(here, "carol@example.com", PASSWORD)
    sign_in(elsewhere, "carol@example.com", PASSWORD)
    mismatch = post_form(
        here,
        "/account/password",
        {"current_password": PASSWORD, "new_password": "a-new-password", "confirm_password": "x"},
    )
    assert mismatch.status_code == 400 and "do not match" in mismatch.get_data(as_text=True)
    wrong = post_form(
        here,
        "/account/password",
        {"current_password": "nope", "new_password": "a-new-pw-1", "confirm_password": "a-new-pw-1"},
    )
    assert wrong.status_code == 400 and "current password is wrong" in wrong.get_data(as_text=True)
    changed = post_form(
        here,
        "/account/password",
        {
            "current_password": PASSWORD,
            "new_password": "a-new-password",
            "confirm_password": "a-new-password",
        },
    )
    assert changed.status_code == 302
    assert here.get("/account").status_code == 200
    assert "/login" in elsewhere.get("/workspaces").headers["Location"]
    # The CLI session token of the same user ended too.
    assert here.get("/api/v2/users/me", headers=personas["carol"].auth).status_code == 401


def test_api_token_page_shows_the_secret_once(client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "dave@example.com", PASSWORD)
    created = post_form(client, "/account/tokens", {"name": "laptop", "lifetime": "7d"}, token_from="/account")
    page = created.get_data(as_text=True)
    assert "Copy it now: it is not shown again." in page
    secret = page.split('id="new-token">', 1)[1].split("<", 1)[0]
    assert client.get("/api/v2/users/me", headers={"Authorization": f"Bearer {secret}"}).json["username"] == "dave"
    again = client.get("/account").get_data(as_text=True)
    assert "laptop" in again and secret not in again
    bad = post_form(client, "/account/tokens", {"name": "x", "lifetime": "forever"}, token_from="/account")
    assert bad.status_code == 400 and "not a duration" in bad.get_data(as_text=True)


def test_last_seen_follows_browser_activity_at_most_once_a_minute(app: Flask, personas: dict[str, Persona]) -> None:
    carol, alice = app.test_client(), app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    sign_in(alice, "alice@example.com", PASSWORD)
    row = alice.get("/users").get_data(as_text=True).split(f'id="user-{personas["carol"].id}"', 1)[1].split("</tr>")[0]
    assert "just now" in row and "never" not in row

    def carol_seen() -> datetime | None:
        with app.app_context():
            user = db.session.get(User, personas["carol"].id)
            assert user is not None
            return user.last_seen_at

    long_ago = utcnow() - timedelta(minutes=10)
    with app.app_context():
        db.session.execute(update(User).where(User.id == personas["carol"].id).values(last_seen_at=long_ago))
        db.session.execute(update(BrowserSession).values(last_used_at=long_ago))
        db.session.commit()
    assert carol.get("/workspaces").status_code == 200
    seen = carol_seen()
    assert seen is not None and seen > long_ago + timedelta(minutes=9)
    assert carol.get("/workspaces").status_code == 200
    assert carol_seen() == seen  # a second page within the minute writes nothing
