"""The dashboard as a person uses it: first-user setup, sign-in, users admin, account and tokens."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.web import csrf_token, post_form, sign_in


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
    # htmx row update: suspend carol; the fragment comes back with her new status.
    token = csrf_token(client, "/users")
    row = client.post(
        f"/users/{personas['carol'].id}",
        data={"status": "suspended"},
        headers={"X-CSRFToken": token, "HX-Request": "true"},
    )
    fragment = row.get_data(as_text=True)
    assert row.status_code == 200
    assert "<tr" in fragment and "suspended" in fragment and "<html" not in fragment


def test_members_and_template_admins_cannot_open_users_page(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for email in ("bob@example.com", "carol@example.com"):
        client.get("/")  # fresh page load
        sign_in(client, email, PASSWORD)
        assert client.get("/users").status_code == 403
        token = csrf_token(client, "/account")
        response = client.post(f"/users/{personas['dave'].id}", data={"status": "suspended", "csrf_token": token})
        assert response.status_code == 403
        post_form(client, "/logout", {}, token_from="/account")


def test_suspension_ends_the_browser_session(app: Flask, personas: dict[str, Persona]) -> None:
    carol, alice = app.test_client(), app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    assert carol.get("/workspaces").status_code == 200
    sign_in(alice, "alice@example.com", PASSWORD)
    token = csrf_token(alice, "/users")
    alice.post(f"/users/{personas['carol'].id}", data={"status": "suspended"}, headers={"X-CSRFToken": token})
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
