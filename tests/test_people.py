"""People: invitations by email, a forced password change, an admin's reset, "forgot password" by email, and
sign-in by username or email. In-process (Flask test client); the emails go through a real SMTP server (aiosmtpd)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.audit.models import AuditLog
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.users.models import PasswordReset, User, UserInvitation
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.net import free_port
from tests.support.notifications import authenticate
from tests.support.people import WatchedMailbox
from tests.support.permissions import more_personas
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

NEW_PASSWORD = "a-password-of-my-own"
ACCESS_URL = "http://slipway.example.com"
CSRF = re.compile(r"[\w-]{20,}\.[\w-]+\.[\w-]{20,}")
LINK = re.compile(r"http://slipway\.example\.com(/(?:invite|reset-password)/[A-Za-z0-9_\-]+)")


@pytest.fixture
def mailbox() -> Iterator[tuple[WatchedMailbox, int]]:
    port, box = free_port(), WatchedMailbox()
    smtp = Controller(box, hostname="127.0.0.1", port=port, authenticator=authenticate, auth_require_tls=False)
    smtp.start()
    yield box, port
    smtp.stop()


@pytest.fixture
def mailing_app(
    tmp_path: Path,
    database_url: str,
    redis_server: str,
    mailbox: tuple[WatchedMailbox, int],
    app: Flask,  # flushes Redis (the reset limits) for this test
    app_factory: Callable[[Settings], Flask],
) -> Flask:
    settings = make_settings(
        tmp_path, database_url, redis_server, email_smarthost=f"127.0.0.1:{mailbox[1]}",
        email_from="slipway@example.com", email_username="mailer", email_password="mail-password",
        access_url=ACCESS_URL,
    )  # fmt: skip
    built = app_factory(settings)
    built.config["TESTING"] = True
    return built


def _link_in(message: str) -> str:
    # Quoted-printable may fold a long line; unfold it before looking.
    found = LINK.search(message.replace("=\n", ""))
    assert found, message
    return found.group(1)


def _invite(client: FlaskClient, persona: Persona, email: str, roles: list[str]) -> Any:
    return client.post("/api/v2/users/invitations", json={"email": email, "roles": roles}, headers=persona.auth)


def _accept(client: FlaskClient, path: str, username: str, password: str = PASSWORD) -> Any:
    form = {"username": username, "password": password, "confirm_password": password}
    return post_form(client, path, form)


def test_an_invitation_without_smtp_answers_its_link_which_makes_the_account_once(
    app: Flask, personas: dict[str, Persona]
) -> None:
    api, alice = app.test_client(), personas["alice"]
    invited = _invite(api, alice, "Ann.Lee@Example.com", ["template-admin"])
    assert invited.status_code == 201, invited.json
    assert invited.json["email"] == "ann.lee@example.com" and invited.json["emailed"] is False
    assert invited.json["roles"] == ["template-admin", "member"]
    path = invited.json["link"].removeprefix("http://127.0.0.1:3000")
    listed = api.get("/api/v2/users/invitations", headers=alice.auth)
    assert [row["email"] for row in listed.json] == ["ann.lee@example.com"]
    with app.app_context():  # only a hash of the link's secret is kept
        stored = db.session.scalars(select(UserInvitation)).one()
        assert path.rpartition("-")[2] not in (stored.secret_hash, stored.lookup_id)

    browser = app.test_client()
    form = browser.get(path).get_data(as_text=True)
    assert 'value="ann-lee"' in form and "ann.lee@example.com" in form
    mismatch = post_form(browser, path, {"username": "ann", "password": PASSWORD, "confirm_password": "other-one"})
    assert mismatch.status_code == 400 and "The passwords do not match." in mismatch.get_data(as_text=True)
    taken = _accept(browser, path, "bob")
    assert taken.status_code == 409 and "This username is taken." in taken.get_data(as_text=True)
    accepted = _accept(browser, path, "ann")
    assert accepted.status_code == 302 and accepted.headers["Location"] == "/workspaces"
    assert "Welcome, ann" in browser.get("/workspaces").get_data(as_text=True)  # signed in
    ann = api.get("/api/v2/users/ann", headers=alice.auth).json
    assert ann["roles"] == ["template-admin", "member"] and ann["must_change_password"] is False

    with app.app_context():  # the acceptance is in the audit log, by the newcomer
        accepted = db.session.scalars(select(AuditLog).where(AuditLog.resource_type == "user_invitation")).all()
        assert [(entry.action, entry.username) for entry in accepted][-1] == ("write", "ann")
    again = app.test_client().get(path)
    assert again.status_code == 409 and "already been used" in again.get_data(as_text=True)
    assert api.get("/api/v2/users/invitations", headers=alice.auth).json == []
    tampered = app.test_client().get(path[:-3] + "xyz")
    assert tampered.status_code == 404 and "not valid" in tampered.get_data(as_text=True)


def test_who_may_invite_and_what_an_invitation_refuses(app: Flask, personas: dict[str, Persona]) -> None:
    api, people = app.test_client(), more_personas(app, personas)
    for name in ("bob", "carol"):
        refused = _invite(api, people[name], "x@example.com", [])
        assert refused.status_code == 403, name
        assert api.get("/api/v2/users/invitations", headers=people[name].auth).status_code == 403
    frank = people["frank"]  # a user admin invites (the menu leads there), but never an owner
    frank_page = app.test_client()
    sign_in(frank_page, "frank@example.com", PASSWORD)
    assert 'href="/users/invitations"' in frank_page.get("/groups").get_data(as_text=True)
    assert '<option value="owner"' not in frank_page.get("/users/invitations").get_data(as_text=True)
    assert _invite(api, frank, "m@example.com", []).status_code == 201
    owner = _invite(api, frank, "o@example.com", ["owner"])
    assert owner.status_code == 403 and owner.json["message"] == "Only an owner may invite someone as an owner."
    assert _invite(api, people["alice"], "not-an-email", []).status_code == 400
    assert _invite(api, people["alice"], "r@example.com", ["root"]).status_code == 400
    assert _invite(api, people["alice"], "carol@example.com", []).status_code == 409
    junk = api.post("/api/v2/users/invitations", json={"email": 3, "roles": "owner"}, headers=frank.auth)
    assert junk.status_code == 400 and {v["field"] for v in junk.json["validations"]} == {"email", "roles"}

    # Inviting again replaces the link; revoking ends it; an expired one says so.
    first = _invite(api, frank, "n@example.com", []).json["link"].removeprefix("http://127.0.0.1:3000")
    second = _invite(api, frank, "n@example.com", []).json
    assert app.test_client().get(first).status_code == 404
    path = second["link"].removeprefix("http://127.0.0.1:3000")
    with app.app_context():
        db.session.execute(update(UserInvitation).where(UserInvitation.id == second["id"]).values(expires_at=utcnow()))
        db.session.commit()
    expired = app.test_client().get(path)
    assert expired.status_code == 409 and "expired" in expired.get_data(as_text=True)
    listed = api.get("/api/v2/users/invitations", headers=frank.auth).json  # kept, marked, until revoked
    assert [(row["email"], row["expired"]) for row in listed if row["email"] == "n@example.com"] == [
        ("n@example.com", True)
    ]
    assert api.delete(f"/api/v2/users/invitations/{second['id']}", headers=frank.auth).status_code == 204
    assert api.delete(f"/api/v2/users/invitations/{second['id']}", headers=frank.auth).status_code == 404
    assert app.test_client().get(path).status_code == 404


def test_the_invitations_page_shows_a_new_link_once_and_revokes(app: Flask, personas: dict[str, Persona]) -> None:
    owner = app.test_client()
    sign_in(owner, "alice@example.com", PASSWORD)
    page = owner.get("/users/invitations").get_data(as_text=True)
    assert "expires in 7 days" in page and "no SMTP is configured" in page
    made = post_form(owner, "/users/invitations", {"email": "pat@example.com", "role": "auditor"})
    shown = made.get_data(as_text=True)
    assert made.status_code == 200 and 'id="new-invitation-link"' in shown and "/invite/" in shown
    assert "Copy" in shown and 'id="pending-invitations"' in shown
    assert "/invite/" not in owner.get("/users/invitations").get_data(as_text=True)  # shown once
    bad = post_form(owner, "/users/invitations", {"email": "nope", "role": "member"})
    assert bad.status_code == 400 and "Enter a valid email address." in bad.get_data(as_text=True)
    invitation = owner.get("/api/v2/users/invitations", headers=personas["alice"].auth).json[0]
    revoked = post_form(owner, f"/users/invitations/{invitation['id']}/revoke", {}, token_from="/users/invitations")
    assert revoked.status_code == 302
    assert 'id="no-invitations"' in owner.get("/users/invitations").get_data(as_text=True)
    users_page = owner.get("/users").get_data(as_text=True)
    assert 'id="invite-people"' in users_page and 'id="invite-card"' in users_page
    from_users_page = post_form(
        owner, "/users/invitations", {"email": "kim@example.com", "role": "member"}, token_from="/users"
    )
    assert 'id="new-invitation-link"' in from_users_page.get_data(as_text=True)


def test_an_invitation_is_emailed_when_smtp_is_configured(
    mailing_app: Flask, mailbox: tuple[WatchedMailbox, int], personas: dict[str, Persona]
) -> None:
    box, _ = mailbox
    invited = _invite(mailing_app.test_client(), personas["alice"], "sam@example.com", [])
    assert invited.status_code == 201 and invited.json["emailed"] is True and "link" not in invited.json
    message = box.wait_for(1)[0]
    assert "Subject: You are invited to Slipway" in message and "To: sam@example.com" in message
    browser = mailing_app.test_client()
    assert _accept(browser, _link_in(message), "sam").status_code == 302
    assert browser.get("/api/v2/users/me").status_code == 401  # the API wants a token, not the cookie
    assert "sam" in browser.get("/account").get_data(as_text=True)


def test_an_invitation_that_cannot_be_sent_is_not_kept(
    tmp_path: Path, database_url: str, redis_server: str, app_factory: Callable[[Settings], Flask],
    personas: dict[str, Persona],
) -> None:  # fmt: skip
    settings = make_settings(
        tmp_path,
        database_url,
        redis_server,
        email_smarthost=f"127.0.0.1:{free_port()}",
        email_from="slipway@example.com",
    )
    broken = app_factory(settings)
    refused = _invite(broken.test_client(), personas["alice"], "lost@example.com", [])
    assert refused.status_code == 502 and "could not be sent" in refused.json["message"]
    assert broken.test_client().get("/api/v2/users/invitations", headers=personas["alice"].auth).json == []


def test_a_person_whose_password_an_admin_chose_must_change_it_first(app: Flask, personas: dict[str, Persona]) -> None:
    api, alice = app.test_client(), personas["alice"]
    body = {"username": "erin", "email": "erin@example.com", "password": PASSWORD, "must_change_password": True}
    assert api.post("/api/v2/users", json=body, headers=alice.auth).status_code == 201
    bad = {**body, "username": "x", "email": "x@example.com", "must_change_password": "yes"}
    assert api.post("/api/v2/users", json=bad, headers=alice.auth).status_code == 400

    token = api.post("/api/v2/users/login", json={"email": "erin", "password": PASSWORD}).json["session_token"]
    auth = {"Authorization": f"Bearer {token}"}
    assert api.get("/api/v2/users/me", headers=auth).json["must_change_password"] is True
    held = api.get("/api/v2/workspaces", headers=auth)
    assert held.status_code == 403 and "must choose a new password" in held.json["message"]

    browser = app.test_client()
    sign_in(browser, "erin", PASSWORD)  # by username
    sent = browser.get("/templates")
    assert sent.status_code == 302 and sent.headers["Location"].startswith("/password/change")
    page = browser.get(sent.headers["Location"]).get_data(as_text=True)
    assert 'id="must-change-why"' in page
    form = {"current_password": PASSWORD, "new_password": NEW_PASSWORD, "confirm_password": NEW_PASSWORD}
    changed = post_form(browser, "/password/change?next=/templates", form, token_from="/password/change")
    assert changed.status_code == 302 and changed.headers["Location"] == "/templates"
    assert browser.get("/templates").status_code == 200
    assert api.get("/api/v2/workspaces", headers=auth).status_code == 401  # the change ended the old token


def test_an_admin_resets_a_password_and_the_person_chooses_a_new_one(app: Flask, personas: dict[str, Persona]) -> None:
    api, people = app.test_client(), more_personas(app, personas)
    carol, frank = people["carol"], people["frank"]
    put = api.put
    assert (
        put(f"/api/v2/users/{people['dave'].id}/password", json={"password": "x" * 9}, headers=carol.auth).status_code
        == 403
    )
    owners = put("/api/v2/users/alice/password", json={"password": "x" * 9}, headers=frank.auth)
    assert owners.status_code == 403 and "owner" in owners.json["message"]
    short = put("/api/v2/users/carol/password", json={"password": "short"}, headers=frank.auth)
    assert short.status_code == 400
    assert put("/api/v2/users/nobody/password", json={"password": "x" * 9}, headers=frank.auth).status_code == 404
    assert (
        put("/api/v2/users/carol/password", json={"password": "temporary-one"}, headers=frank.auth).status_code == 204
    )
    assert api.get("/api/v2/users/me", headers=carol.auth).status_code == 401  # signed out everywhere

    token = api.post("/api/v2/users/login", json={"email": "carol@example.com", "password": "temporary-one"})
    auth = {"Authorization": f"Bearer {token.json['session_token']}"}
    assert api.get("/api/v2/templates", headers=auth).status_code == 403
    others = put("/api/v2/users/dave/password", json={"password": "x" * 9}, headers=auth)
    assert others.status_code == 403
    no_old = put("/api/v2/users/me/password", json={"password": NEW_PASSWORD}, headers=auth)
    assert no_old.status_code == 400 and no_old.json["validations"][0]["field"] == "old_password"
    wrong_old = put("/api/v2/users/me/password", json={"password": NEW_PASSWORD, "old_password": "nope"}, headers=auth)
    assert wrong_old.status_code == 400
    body = {"password": NEW_PASSWORD, "old_password": "temporary-one"}
    assert put("/api/v2/users/me/password", json=body, headers=auth).status_code == 204
    again = api.post("/api/v2/users/login", json={"email": "carol", "password": NEW_PASSWORD}).json["session_token"]
    assert api.get("/api/v2/templates", headers={"Authorization": f"Bearer {again}"}).status_code == 200

    owner = app.test_client()  # the dashboard's reset
    sign_in(owner, "alice@example.com", PASSWORD)
    assert f"/users/{people['dave'].id}/password" in owner.get("/users").get_data(as_text=True)
    reset = post_form(owner, f"/users/{people['dave'].id}/password", {"password": "given-by-alice"})
    assert reset.status_code == 302 and "dave&#39;s password was reset" in owner.get("/users").get_data(as_text=True)
    own = post_form(owner, f"/users/{personas['alice'].id}/password", {"password": "given-by-alice"})
    assert own.status_code == 400 and "Account page" in own.get_data(as_text=True)

    admin = app.test_client()  # a user admin's reset, by name on the Invite people page (they have no Users page)
    sign_in(admin, "frank", PASSWORD)
    by_name = post_form(
        admin, "/users/password-reset", {"user": "Dave", "password": "given-by-frank"}, token_from="/users/invitations"
    )
    assert by_name.status_code == 302 and "dave&#39;s password was reset" in admin.get("/users/invitations").get_data(
        as_text=True
    )
    unknown = post_form(
        admin, "/users/password-reset", {"user": "nobody", "password": "x" * 9}, token_from="/users/invitations"
    )
    assert unknown.status_code == 404 and "Nobody signs in as" in unknown.get_data(as_text=True)
    owner_refused = post_form(
        admin,
        "/users/password-reset",
        {"user": "alice@example.com", "password": "x" * 9},
        token_from="/users/invitations",
    )
    assert owner_refused.status_code == 403 and "Only an owner may reset an owner" in owner_refused.get_data(
        as_text=True
    )


def test_forgot_password_emails_a_single_use_link_and_never_says_who_has_an_account(
    mailing_app: Flask, mailbox: tuple[WatchedMailbox, int], personas: dict[str, Persona]
) -> None:
    box, carol = mailbox[0], personas["carol"]
    assert 'id="forgot-password"' in mailing_app.test_client().get("/login").get_data(as_text=True)
    other_browser = mailing_app.test_client()
    sign_in(other_browser, "carol@example.com", PASSWORD)
    answers = []
    for email in ("nobody@example.com", "carol@example.com"):
        browser = mailing_app.test_client()
        answered = post_form(browser, "/forgot-password", {"email": email})
        assert answered.status_code == 200
        # The same page but for the email and each page's own CSRF token.
        answers.append(CSRF.sub("", answered.get_data(as_text=True).replace(email, "EMAIL")))
    assert answers[0] == answers[1] and 'id="reset-requested"' in answers[0]
    message = box.wait_for(1)[0]
    assert "To: carol@example.com" in message and "Subject: Reset your Slipway password" in message
    path = _link_in(message)
    with mailing_app.app_context():
        assert path.rpartition("-")[2] not in db.session.scalars(select(PasswordReset.secret_hash)).all()

    browser = mailing_app.test_client()
    assert "carol" in browser.get(path).get_data(as_text=True)
    mismatch = post_form(browser, path, {"password": NEW_PASSWORD, "confirm_password": "different-one"})
    assert mismatch.status_code == 400
    done = post_form(browser, path, {"password": NEW_PASSWORD, "confirm_password": NEW_PASSWORD})
    assert done.status_code == 302 and browser.get("/account").status_code == 200
    assert other_browser.get("/account").status_code == 302  # her other sessions ended
    assert mailing_app.test_client().get("/api/v2/users/me", headers=carol.auth).status_code == 401
    used = mailing_app.test_client().get(path)
    assert used.status_code == 404 and "not valid" in used.get_data(as_text=True)
    sign_in(mailing_app.test_client(), "carol", NEW_PASSWORD)

    # A few requests per email an hour, whether or not it has an account.
    statuses = [post_form(mailing_app.test_client(), "/forgot-password", {"email": "x@example.com"}).status_code
                for _ in range(4)]  # fmt: skip
    assert statuses == [200, 200, 200, 429]
    assert post_form(mailing_app.test_client(), "/forgot-password", {"email": "nope"}).status_code == 400


def test_without_smtp_forgot_password_says_to_ask_an_administrator(app: Flask, personas: dict[str, Persona]) -> None:
    browser = app.test_client()
    assert 'id="ask-an-admin"' in browser.get("/forgot-password").get_data(as_text=True)
    answered = browser.post(
        "/forgot-password", data={"email": "carol@example.com", "csrf_token": csrf_token(browser, "/login")}
    )
    assert answered.status_code == 200 and 'id="ask-an-admin"' in answered.get_data(as_text=True)
    with app.app_context():
        assert db.session.scalars(select(PasswordReset)).all() == []


def test_people_sign_in_by_username_or_email(app: Flask, personas: dict[str, Persona]) -> None:
    for login in ("carol", "CAROL", "Carol@Example.com"):
        sign_in(app.test_client(), login, PASSWORD)
    page = app.test_client().get("/login").get_data(as_text=True)
    assert "Username or email" in page
    wrong = post_form(app.test_client(), "/login", {"email": "carol", "password": "not-her-password"})
    assert wrong.status_code == 401
    api = app.test_client().post("/api/v2/users/login", json={"email": "carol", "password": PASSWORD})
    assert api.status_code == 201
    # Failures count per account, by whichever name: a username and an email do not get a limit each.
    names = ["carol", "carol@example.com"] * 5
    for name in names:
        refused = app.test_client().post("/api/v2/users/login", json={"email": name, "password": "x" * 9})
        assert refused.status_code == 401
    limited = app.test_client().post("/api/v2/users/login", json={"email": "Carol", "password": PASSWORD})
    assert limited.status_code == 429
    with app.app_context():
        assert db.session.scalar(select(User.must_change_password).where(User.username == "carol")) is False


def test_an_admin_made_account_on_the_users_page_must_change_its_password(
    app: Flask, personas: dict[str, Persona]
) -> None:
    owner = app.test_client()
    sign_in(owner, "alice@example.com", PASSWORD)
    form = {"username": "gil", "email": "gil@example.com", "password": PASSWORD, "role": "member"}
    assert post_form(owner, "/users", {**form, "must_change_password": "on"}).status_code == 302
    assert "must choose a new password" in owner.get("/users?q=gil").get_data(as_text=True)
    quiet = {**form, "username": "hal", "email": "hal@example.com"}  # unticked: the owner's choice
    assert post_form(owner, "/users", quiet).status_code == 302
    gil, hal = app.test_client(), app.test_client()
    sign_in(gil, "gil", PASSWORD)
    sign_in(hal, "hal", PASSWORD)
    assert gil.get("/workspaces").status_code == 302 and hal.get("/workspaces").status_code == 200
    assert post_form(gil, "/logout", {}, token_from="/password/change").status_code == 302


def test_with_single_sign_on_the_pages_say_people_can_use_it(
    settings: Settings, app_factory: Callable[[Settings], Flask], personas: dict[str, Persona]
) -> None:
    sso = dataclasses.replace(
        settings, oidc_issuer_url="https://idp.example.com", oidc_client_id="slipway", oidc_sign_in_text="Acme SSO"
    )
    owner = app_factory(sso).test_client()
    assert 'id="oidc-sign-in"' in owner.get("/login").get_data(as_text=True)
    sign_in(owner, "alice", PASSWORD)
    hint = owner.get("/users").get_data(as_text=True)
    assert "<strong>Acme SSO</strong> (single sign-on)" in hint and "they need no invitation" in hint
    assert "sign in with Acme SSO without an invitation" in owner.get("/users/invitations").get_data(as_text=True)


@pytest.mark.databases("postgresql")  # where a NUL character reaches the database as a 500 unless refused first
def test_names_and_links_with_a_nul_character_are_refused_not_a_500(app: Flask, personas: dict[str, Persona]) -> None:
    api, alice = app.test_client(), personas["alice"]
    owner = app.test_client()
    sign_in(owner, "alice", PASSWORD)
    answers = {
        "invite": _invite(api, alice, "a\x00b@example.com", []).status_code,
        "login": api.post("/api/v2/users/login", json={"email": "ca\x00rol", "password": "x" * 9}).status_code,
        "login page": post_form(app.test_client(), "/login", {"email": "ca\x00rol", "password": "x" * 9}).status_code,
        "set password": api.put(
            "/api/v2/users/a%00b/password", json={"password": "x" * 9}, headers=alice.auth
        ).status_code,
        "revoke": api.delete("/api/v2/users/invitations/a%00b", headers=alice.auth).status_code,
        "invitation link": api.get("/invite/a%00b-cd").status_code,
        "reset link": api.get("/reset-password/a%00b-cd").status_code,
        "reset page": owner.get("/users/a%00b/password").status_code,
    }
    assert answers == {
        "invite": 400, "login": 400, "login page": 400, "set password": 404, "revoke": 404,
        "invitation link": 404, "reset link": 404, "reset page": 404,
    }  # fmt: skip
