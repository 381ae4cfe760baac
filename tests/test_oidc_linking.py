"""When a sign-in through the identity provider may use an existing account, run in-process on both databases
against a real OpenID provider: the app's test client is the browser at Slipway, a fresh httpx client the
browser at the provider (the app itself talks to the provider for discovery, the token and userinfo).

An email match alone never gets into an existing account: the provider must say the email is verified, and then
the account's holder confirms with their password (or from their Account page), or an owner allowed it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.auth import oidc
from app.core.config import Settings
from app.core.extensions import db
from app.users.models import User
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.oidc import CLIENT_ID, CLIENT_SECRET, OidcProvider, provider_sign_in
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

RP_URL = "http://localhost"  # the test client's own base URL, so the provider's redirect lands on the app
ACCOUNTS = {
    # Someone who set alice's address at the provider, which says nothing about verifying it.
    "mallory": {"email": "alice@example.com", "preferred_username": "mallory", "groups": []},
    "alice-sso": {"email": "Alice@Example.com", "email_verified": True, "preferred_username": "alice", "groups": []},
    "bob-sso": {"email": "bob@example.com", "email_verified": "true", "preferred_username": "bob"},
    "carol-sso": {"email": "carol.work@example.com", "email_verified": True, "preferred_username": "carol"},
}
LINK_NEEDED = "An account with this email address already exists."


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with OidcProvider(RP_URL, ACCOUNTS, log_path=tmp_path_factory.mktemp("idp") / "idp.log") as idp:
        yield idp


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str, provider: OidcProvider) -> Settings:
    """The conftest's settings plus single sign-on at the module's provider; `admins` grants the owner role."""
    return make_settings(
        tmp_path,
        database_url,
        redis_server,
        access_url=RP_URL,
        oidc_issuer_url=provider.issuer,
        oidc_client_id=CLIENT_ID,
        oidc_client_secret=CLIENT_SECRET,
        oidc_role_field="groups",
        oidc_role_mapping="admins=owner",
    )


def oidc_sign_in(client: FlaskClient, login: str, start: str = "/login/oidc") -> Any:
    """Sign in at the provider as ``login`` (in a browser of its own) and return Slipway's callback response."""
    if start == "/login/oidc":
        redirect = client.get(start)
    else:  # link mode: a form on the Account page
        redirect = post_form(client, start, {}, token_from="/account")
    assert redirect.status_code == 302, redirect.get_data(as_text=True)
    with httpx.Client(follow_redirects=False, timeout=30) as browser_at_provider:
        callback = provider_sign_in(browser_at_provider, redirect.headers["Location"], login, RP_URL)
    return client.get(callback.removeprefix(RP_URL))


def signed_in_as(client: FlaskClient) -> str | None:
    page = client.get("/account")
    if page.status_code != 200:
        return None
    return page.text.split('<div class="page-head"><h1>Account</h1><p class="muted">')[1].split(" ·")[0]


def user_row(app: Flask, user_id: str) -> User:
    with app.app_context():
        user = db.session.get(User, user_id)
        assert user is not None
        db.session.expunge(user)
        return user


def confirm_link(client: FlaskClient, decision: str) -> Any:
    return post_form(client, "/account/oidc/link", {"decision": decision})


def test_an_identity_without_email_verified_does_not_get_into_the_owners_account(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    page = oidc_sign_in(client, "mallory")
    assert page.status_code == 403 and "does not confirm that your email address is verified" in page.text
    assert signed_in_as(client) is None
    alice = user_row(app, personas["alice"].id)
    assert alice.oidc_subject is None and alice.roles == ["owner"]
    # Nothing waits to be linked either: the password sign-in that follows is an ordinary one.
    sign_in(client, "alice@example.com", PASSWORD)
    assert client.get("/account/oidc/link").status_code == 404


def test_a_verified_email_does_not_get_into_a_password_account_without_its_password(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    page = oidc_sign_in(client, "alice-sso")
    assert page.status_code == 409 and LINK_NEEDED in page.text
    assert "alice" not in page.text  # nothing about the account (name, address, roles) beyond that it exists
    assert signed_in_as(client) is None
    assert user_row(app, personas["alice"].id).oidc_subject is None
    confirm = client.get("/account/oidc/link")
    assert confirm.status_code == 302 and "/login" in confirm.headers["Location"]


def test_password_sign_in_then_confirm_links_the_identity(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    page = oidc_sign_in(client, "alice-sso")
    password_sign_in = page.text.split('id="password-sign-in" href="')[1].split('"')[0].replace("&amp;", "&")
    assert password_sign_in.startswith("/login?next=")
    signed = post_form(client, password_sign_in, {"email": "alice@example.com", "password": PASSWORD})
    assert signed.status_code == 302 and signed.headers["Location"] == "/account/oidc/link"
    question = client.get("/account/oidc/link").text
    assert "Link OpenID Connect identity <strong>alice@example.com</strong>" in question and "alice-sso" in question
    assert user_row(app, personas["alice"].id).oidc_subject is None  # nothing until the person says so

    linked = confirm_link(client, "link")
    assert linked.status_code == 302 and linked.headers["Location"] == "/account"
    assert "linked with OpenID Connect" in client.get("/account").text
    assert user_row(app, personas["alice"].id).oidc_subject == "alice-sso"
    assert client.get("/account/oidc/link").status_code == 404  # used up

    with app.test_client() as other_browser:
        landed = oidc_sign_in(other_browser, "alice-sso")
        assert landed.status_code == 302 and landed.headers["Location"] == "/workspaces"
        assert signed_in_as(other_browser) == "alice@example.com"
    assert user_row(app, personas["alice"].id).roles == ["owner"]


def test_cancel_leaves_the_account_unlinked(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    oidc_sign_in(client, "alice-sso")
    sign_in(client, "alice@example.com", PASSWORD)
    canceled = confirm_link(client, "cancel")
    assert canceled.status_code == 302 and "Nothing was linked" in client.get("/account").text
    assert user_row(app, personas["alice"].id).oidc_subject is None
    assert client.get("/account/oidc/link").status_code == 404
    assert oidc_sign_in(app.test_client(), "alice-sso").status_code == 409  # still asks for the password


def test_a_waiting_identity_is_offered_to_no_other_account(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    oidc_sign_in(client, "alice-sso")
    sign_in(client, "carol@example.com", PASSWORD)  # someone else signs in at this browser
    assert client.get("/account/oidc/link").status_code == 403
    assert client.get("/account/oidc/link").status_code == 404  # and it is gone
    assert user_row(app, personas["carol"].id).oidc_subject is None
    assert user_row(app, personas["alice"].id).oidc_subject is None


def test_a_waiting_identity_expires(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oidc, "PENDING_LINK_LIFETIME", -1)  # already past its time when stored
    oidc_sign_in(client, "alice-sso")
    sign_in(client, "alice@example.com", PASSWORD)
    page = client.get("/account/oidc/link")
    assert page.status_code == 404 and "expired" in page.text


def test_signing_out_forgets_a_waiting_identity(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    oidc_sign_in(client, "alice-sso")
    sign_in(client, "alice@example.com", PASSWORD)
    post_form(client, "/logout", {}, token_from="/account")
    sign_in(client, "alice@example.com", PASSWORD)
    assert client.get("/account/oidc/link").status_code == 404


def test_a_confirmation_without_csrf_token_is_refused(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    oidc_sign_in(client, "alice-sso")
    sign_in(client, "alice@example.com", PASSWORD)
    assert client.post("/account/oidc/link", data={"decision": "link"}).status_code == 400
    assert user_row(app, personas["alice"].id).oidc_subject is None


def test_a_signed_in_user_links_from_the_account_page(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "carol@example.com", PASSWORD)
    assert 'id="oidc-link-start"' in client.get("/account").text
    # Link mode: the identity may carry another address; carol proved both sides by signing in to each.
    back = oidc_sign_in(client, "carol-sso", start="/account/oidc/link/start")
    assert back.status_code == 302 and back.headers["Location"] == "/account/oidc/link"
    assert "carol.work@example.com" in client.get("/account/oidc/link").text
    assert confirm_link(client, "link").status_code == 302
    assert user_row(app, personas["carol"].id).oidc_subject == "carol-sso"
    assert 'id="oidc-link-start"' not in client.get("/account").text

    with app.test_client() as other_browser:
        assert oidc_sign_in(other_browser, "carol-sso").headers["Location"] == "/workspaces"
        assert signed_in_as(other_browser) == "carol@example.com"


def test_an_identity_linked_to_someone_else_is_refused(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    with app.app_context():
        carol = db.session.get(User, personas["carol"].id)
        assert carol is not None
        carol.oidc_subject = "carol-sso"
        db.session.commit()
    sign_in(client, "dave@example.com", PASSWORD)
    page = oidc_sign_in(client, "carol-sso", start="/account/oidc/link/start")
    assert page.status_code == 403 and "already linked to another Slipway account" in page.text
    assert client.get("/account/oidc/link").status_code == 404
    assert user_row(app, personas["dave"].id).oidc_subject is None
    assert signed_in_as(client) == "dave@example.com"  # still dave, not carol


def test_an_identity_linked_elsewhere_while_waiting_is_refused_at_confirmation(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "dave@example.com", PASSWORD)
    oidc_sign_in(client, "carol-sso", start="/account/oidc/link/start")
    with app.app_context():
        carol = db.session.get(User, personas["carol"].id)
        assert carol is not None
        carol.oidc_subject = "carol-sso"  # linked by carol in the meantime
        db.session.commit()
    refused = confirm_link(client, "link")
    assert refused.status_code == 409 and "already linked to another Slipway account" in refused.text
    assert user_row(app, personas["dave"].id).oidc_subject is None


def test_link_mode_finished_after_signing_out_links_nothing(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "dave@example.com", PASSWORD)
    redirect = post_form(client, "/account/oidc/link/start", {}, token_from="/account")
    post_form(client, "/logout", {}, token_from="/account")
    with httpx.Client(follow_redirects=False, timeout=30) as browser_at_provider:
        callback = provider_sign_in(browser_at_provider, redirect.headers["Location"], "carol-sso", RP_URL)
    page = client.get(callback.removeprefix(RP_URL))
    assert page.status_code == 403 and "no longer signed in as the account that started linking" in page.text
    assert user_row(app, personas["dave"].id).oidc_subject is None
    assert signed_in_as(client) is None


def test_an_owner_allows_linking_on_the_users_page(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    bob_id = personas["bob"].id
    assert "Allow single sign-on linking" in client.get("/users").text
    token = csrf_token(client, "/users")
    row = client.post(f"/users/{bob_id}/oidc-link", data={"allow": "true"}, headers={"X-CSRFToken": token})
    assert row.status_code == 200 and "linking allowed until" in row.text and "<html" not in row.text

    with app.test_client() as bobs_browser:
        landed = oidc_sign_in(bobs_browser, "bob-sso")  # email_verified: "true", as a string
        assert landed.status_code == 302 and signed_in_as(bobs_browser) == "bob@example.com"
    bob = user_row(app, bob_id)
    assert bob.oidc_subject == "bob-sso" and bob.oidc_link_allowed_until is None
    assert bob.roles == ["template-admin"]  # not a mapped role: kept
    assert 'badge badge-ok">linked' in client.get("/users").text


def test_an_owner_can_withdraw_the_permission(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    token = csrf_token(client, "/users")
    bob_id = personas["bob"].id
    client.post(f"/users/{bob_id}/oidc-link", data={"allow": "true"}, headers={"X-CSRFToken": token})
    row = client.post(f"/users/{bob_id}/oidc-link", data={"allow": "false"}, headers={"X-CSRFToken": token})
    assert "Allow single sign-on linking" in row.text
    assert oidc_sign_in(app.test_client(), "bob-sso").status_code == 409
    assert user_row(app, bob_id).oidc_subject is None


def test_an_owners_permission_does_not_accept_an_unverified_email(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "alice@example.com", PASSWORD)
    token = csrf_token(client, "/users")
    client.post(f"/users/{personas['alice'].id}/oidc-link", data={"allow": "true"}, headers={"X-CSRFToken": token})
    assert oidc_sign_in(app.test_client(), "mallory").status_code == 403
    assert user_row(app, personas["alice"].id).oidc_subject is None


def test_an_empty_group_claim_does_not_demote_the_last_owner(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], caplog: pytest.LogCaptureFixture
) -> None:
    with app.app_context():
        alice = db.session.get(User, personas["alice"].id)
        assert alice is not None
        alice.oidc_subject = "alice-sso"
        db.session.commit()
    with caplog.at_level(logging.WARNING, logger="app.auth.oidc"):
        landed = oidc_sign_in(client, "alice-sso")  # groups: [], and `admins` maps to owner
    assert landed.status_code == 302 and signed_in_as(client) == "alice@example.com"
    assert "last active owner" not in client.get("/workspaces").text  # nothing alarming for the person
    assert user_row(app, personas["alice"].id).roles == ["owner"]
    assert "kept the owner role of alice" in caplog.text


@pytest.mark.parametrize("persona", ["alice", "bob", "carol", "dave"])
def test_every_persona_links_only_their_own_account(
    app: Flask, personas: dict[str, Persona], persona: str, provider: OidcProvider
) -> None:
    """The link routes act on the signed-in user alone: each persona's flow links its own account, and an identity
    waiting for alice is refused to everyone else."""
    waiting_for_alice = app.test_client()
    oidc_sign_in(waiting_for_alice, "alice-sso")
    sign_in(waiting_for_alice, f"{persona}@example.com", PASSWORD)
    expected = 200 if persona == "alice" else 403
    assert waiting_for_alice.get("/account/oidc/link").status_code == expected

    own = app.test_client()
    sign_in(own, f"{persona}@example.com", PASSWORD)
    assert own.get("/account/oidc/link").status_code == 404  # nothing waits for them
    oidc_sign_in(own, f"{persona}-own", start="/account/oidc/link/start")  # the provider makes up this account
    assert confirm_link(own, "link").status_code == 302
    linked = {name: user_row(app, person.id).oidc_subject for name, person in personas.items()}
    assert linked == {name: (f"{persona}-own" if name == persona else None) for name in personas}
