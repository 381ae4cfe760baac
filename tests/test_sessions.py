"""Browser sessions live on the server: signing out ends that session (a copied cookie stops working), other
browsers stay signed in, "Sign out everywhere" ends them all, and an expired session is refused."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.core.columns import utcnow
from app.core.extensions import db
from app.users.models import BrowserSession
from tests.conftest import PASSWORD, Persona
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

COOKIE = "slipway_session"


def signed_in(app: Flask, email: str) -> FlaskClient:
    client = app.test_client()
    sign_in(client, email, PASSWORD)
    assert client.get("/workspaces").status_code == 200
    return client


def copy_of(app: Flask, client: FlaskClient) -> FlaskClient:
    """Another client holding the very same cookie, as someone who copied it would."""
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None
    thief = app.test_client()
    thief.set_cookie(COOKIE, cookie.value)
    assert thief.get("/workspaces").status_code == 200
    return thief


def is_signed_out(client: FlaskClient) -> bool:
    reply = client.get("/workspaces")
    return reply.status_code == 302 and "/login" in reply.headers["Location"]


def test_signing_out_ends_the_session_even_for_a_copied_cookie(app: Flask, personas: dict[str, Persona]) -> None:
    here = signed_in(app, "carol@example.com")
    copied = copy_of(app, here)
    elsewhere = signed_in(app, "carol@example.com")  # the same person in another browser

    signed_out = post_form(here, "/logout", {}, token_from="/workspaces")
    assert signed_out.status_code == 302 and signed_out.headers["Location"] == "/login"
    assert is_signed_out(here)
    assert is_signed_out(copied)  # the session ended on the server, not only in the browser that asked
    assert elsewhere.get("/workspaces").status_code == 200


def test_sign_out_everywhere_ends_browser_sessions_and_session_tokens_but_not_api_tokens(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol = personas["carol"]
    api_token = client.post("/api/v2/users/me/tokens", json={"name": "ci"}, headers=carol.auth).json["token"]
    here, elsewhere = signed_in(app, "carol@example.com"), signed_in(app, "carol@example.com")
    copied = copy_of(app, elsewhere)
    dave = signed_in(app, "dave@example.com")
    account = here.get("/account").get_data(as_text=True)
    assert "Sign out everywhere" in account

    reply = post_form(here, "/logout/everywhere", {}, token_from="/account")
    assert reply.status_code == 302 and reply.headers["Location"] == "/login"
    assert "You have signed out everywhere" in here.get("/login").get_data(as_text=True)
    for browser in (here, elsewhere, copied):
        assert is_signed_out(browser)
    assert client.get("/api/v2/users/me", headers=carol.auth).status_code == 401  # her CLI session token
    named = client.get("/api/v2/users/me", headers={"Authorization": f"Bearer {api_token}"})
    assert named.status_code == 200 and named.json["username"] == "carol"
    assert dave.get("/workspaces").status_code == 200  # nobody else is touched
    assert client.get("/api/v2/users/me", headers=personas["dave"].auth).status_code == 200


def test_sign_out_everywhere_needs_the_forms_token(app: Flask, personas: dict[str, Persona]) -> None:
    carol = signed_in(app, "carol@example.com")
    forged = carol.post("/logout/everywhere")  # no CSRF token: another site cannot sign people out
    assert forged.status_code == 400
    assert carol.get("/workspaces").status_code == 200


def test_the_cookie_names_a_session_whose_secret_is_stored_only_as_a_hash(
    app: Flask, personas: dict[str, Persona]
) -> None:
    carol = signed_in(app, "carol@example.com")
    cookie = carol.get_cookie(COOKIE)
    assert cookie is not None
    serializer = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]
    credential = serializer.loads(cookie.value)["_user_id"]
    assert personas["carol"].id not in cookie.value and personas["carol"].id not in credential
    lookup_id, _, secret = credential.partition("-")
    with app.app_context():
        row = db.session.scalar(select(BrowserSession).where(BrowserSession.lookup_id == lookup_id))
        assert row is not None and row.user_id == personas["carol"].id
        assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest() != secret
        lifetime = row.expires_at - row.created_at
    assert lifetime == timedelta(seconds=app.config["SLIPWAY_SETTINGS"].session_duration)  # --session-duration


def test_an_expired_session_is_refused(app: Flask, personas: dict[str, Persona]) -> None:
    carol, dave = signed_in(app, "carol@example.com"), signed_in(app, "dave@example.com")
    with app.app_context():
        db.session.execute(
            update(BrowserSession)
            .where(BrowserSession.user_id == personas["carol"].id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
        db.session.commit()
    assert is_signed_out(carol)
    assert dave.get("/workspaces").status_code == 200
    again = signed_in(app, "carol@example.com")  # signing in again prunes the expired row
    assert again.get("/account").status_code == 200
    with app.app_context():
        rows = db.session.scalars(select(BrowserSession).where(BrowserSession.user_id == personas["carol"].id))
        assert len(list(rows)) == 1


def test_the_account_page_lists_sessions_and_signs_out_another_browser(
    app: Flask, personas: dict[str, Persona]
) -> None:
    here, other = signed_in(app, "carol@example.com"), signed_in(app, "carol@example.com")
    dave = signed_in(app, "dave@example.com")
    page = here.get("/account").get_data(as_text=True)
    assert page.count("this browser") == 1
    with app.app_context():
        ids = list(db.session.scalars(select(BrowserSession.id).where(BrowserSession.user_id == personas["carol"].id)))
    # Each is listed; the other browser has a sign-out button, this one is marked instead.
    assert len(ids) == 2
    other_ids = [session_id for session_id in ids if f"/account/sessions/{session_id}/delete" in page]
    assert len(other_ids) == 1
    other_id = other_ids[0]

    token = csrf_token(dave, "/account")
    assert dave.post(f"/account/sessions/{other_id}/delete", data={"csrf_token": token}).status_code == 404
    assert other.get("/workspaces").status_code == 200  # nobody ends someone else's session

    ended = post_form(here, f"/account/sessions/{other_id}/delete", {}, token_from="/account")
    assert ended.status_code == 302
    assert is_signed_out(other)
    assert here.get("/workspaces").status_code == 200
    again = post_form(here, f"/account/sessions/{other_id}/delete", {}, token_from="/account")
    assert again.status_code == 404 and "No such session" in again.get_data(as_text=True)
