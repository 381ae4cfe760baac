"""What a sign-in through the identity provider does with its claims: sign in, ask for a password to link, link
with an owner's permission, sign up, refuse, sync roles.

The flow itself (discovery, PKCE, state, nonce, ID token) runs against a real provider in test_oidc_flow.py;
these rules are plain functions, checked here on both databases.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask

from app.auth.oidc import LinkNeeded, OidcError, sign_in, unique_username
from app.core.columns import utcnow
from app.core.config import Settings, SettingsError, load_settings
from app.core.errors import Conflict
from app.core.extensions import db
from app.users.models import User
from app.users.services import allow_oidc_linking, update_user, users_query
from tests.conftest import Persona

pytestmark = pytest.mark.databases("sqlite")

OIDC = {"oidc_issuer_url": "http://idp.example", "oidc_client_id": "slipway"}


def _claims(sub: str = "sub-1", **extra: Any) -> dict[str, Any]:
    return {"sub": sub, "email": "erin@example.com", "email_verified": True, "preferred_username": "erin", **extra}


def _oidc(settings: Settings, **changes: Any) -> Settings:
    return replace(settings, **OIDC, **changes)


def _users(app: Flask) -> dict[str, User]:
    with app.app_context():
        return {user.username: user for user in db.session.scalars(users_query())}  # people, not system users


def test_a_new_person_becomes_a_member_with_a_valid_unique_username(
    app: Flask, settings: Settings, personas: dict[str, Persona]
) -> None:
    with app.app_context():
        first = sign_in(_oidc(settings), _claims(preferred_username="carol"))  # carol is taken
        assert (first.username, first.roles, first.login_type) == ("carol-2", [], "oidc")
        odd = sign_in(_oidc(settings), _claims("sub-2", email="x@example.com", preferred_username="Dr. Émile O'Neil"))
        assert odd.username == "Dr-mile-O-Neil"
        again = sign_in(_oidc(settings), _claims(preferred_username="renamed-at-the-idp"))
        assert again.id == first.id  # found by subject, whatever the claims say now
        assert unique_username("-" * 40) == "user"
        assert len(unique_username("a" * 40)) == 32


def test_the_first_person_in_becomes_the_owner(app: Flask, settings: Settings) -> None:
    with app.app_context():
        assert sign_in(_oidc(settings), _claims()).roles == ["owner"]
        assert sign_in(_oidc(settings), _claims("sub-2", email="f@example.com", preferred_username="f")).roles == []


def test_a_verified_email_asks_for_the_password_of_an_existing_account(
    app: Flask, settings: Settings, personas: dict[str, Persona]
) -> None:
    with app.app_context():
        with pytest.raises(LinkNeeded) as needed:
            sign_in(_oidc(settings), _claims(email="Carol@Example.com"))
        link = needed.value.link
        assert (link.account_id, link.subject, link.email, link.issuer) == (
            personas["carol"].id,
            "sub-1",
            "carol@example.com",
            "http://idp.example",
        )
    assert _users(app)["carol"].oidc_subject is None and "erin" not in _users(app)


@pytest.mark.parametrize("verified", [None, False, "false", "yes", 1])
@pytest.mark.parametrize("ignore_email_verified", [False, True])
def test_an_email_not_explicitly_verified_never_links_an_existing_account(
    app: Flask, settings: Settings, personas: dict[str, Persona], verified: object, ignore_email_verified: bool
) -> None:
    """A provider that says nothing has not vouched for the address; --oidc-ignore-email-verified is for sign-ups."""
    claims = _claims(email="alice@example.com")
    if verified is None:
        del claims["email_verified"]
    else:
        claims["email_verified"] = verified
    with app.app_context():
        alice = db.session.get(User, personas["alice"].id)
        assert alice is not None
        alice.oidc_link_allowed_until = utcnow() + timedelta(days=1)  # not even with an owner's permission
        db.session.commit()
        with pytest.raises(OidcError) as refused:
            sign_in(_oidc(settings, oidc_ignore_email_verified=ignore_email_verified), claims)
        assert not isinstance(refused.value, LinkNeeded)
    alice_after = _users(app)["alice"]
    assert alice_after.oidc_subject is None and alice_after.roles == ["owner"]


@pytest.mark.parametrize("verified", [True, "true", "True"])
def test_an_owners_permission_links_on_a_verified_email(
    app: Flask, settings: Settings, personas: dict[str, Persona], verified: object
) -> None:
    with app.app_context():
        update = allow_oidc_linking(personas["carol"].id, True)
        assert update.oidc_link_allowed
        user = sign_in(_oidc(settings), _claims(email="carol@example.com", email_verified=verified))
        assert user.id == personas["carol"].id and user.oidc_subject == "sub-1"
        assert user.oidc_link_allowed_until is None  # used up
        assert user.login_type == "password"  # the password still works too


def test_an_expired_owners_permission_links_nothing(
    app: Flask, settings: Settings, personas: dict[str, Persona]
) -> None:
    with app.app_context():
        carol = db.session.get(User, personas["carol"].id)
        assert carol is not None
        carol.oidc_link_allowed_until = utcnow() - timedelta(seconds=1)
        db.session.commit()
        with pytest.raises(LinkNeeded):
            sign_in(_oidc(settings), _claims(email="carol@example.com"))
    assert _users(app)["carol"].oidc_subject is None


def test_an_account_linked_to_another_identity_is_not_moved_by_email(
    app: Flask, settings: Settings, personas: dict[str, Persona]
) -> None:
    with app.app_context():
        first = sign_in(_oidc(settings), _claims())
        with pytest.raises(OidcError, match="linked to another identity"):
            sign_in(_oidc(settings), _claims("sub-2"))  # same verified email, another person at the provider
        with pytest.raises(Conflict, match="already linked"):
            allow_oidc_linking(first.id, True)
    assert _users(app)["erin"].oidc_subject == "sub-1"


@pytest.mark.parametrize(
    ("changes", "claims", "words"),
    [
        ({}, _claims(email_verified=False), "not verified"),
        ({"oidc_email_domains": ("corp.example",)}, _claims(), "example.com may not sign in"),
        ({"oidc_allow_signups": False}, _claims(), "Sign-ups are disabled"),
        ({}, _claims(sub=""), "no subject"),
        ({}, {"sub": "x", "preferred_username": "nomail"}, "no email address"),
    ],
)
def test_refusals_create_no_account(
    app: Flask, settings: Settings, changes: dict[str, Any], claims: dict[str, Any], words: str
) -> None:
    with app.app_context():
        with pytest.raises(OidcError, match=words):
            sign_in(_oidc(settings, **changes), claims)
    assert _users(app) == {}


def test_unverified_email_is_accepted_when_told_to(app: Flask, settings: Settings) -> None:
    with app.app_context():
        user = sign_in(_oidc(settings, oidc_ignore_email_verified=True), _claims(email_verified=False))
        assert user.email == "erin@example.com"


def test_suspended_users_are_refused(app: Flask, settings: Settings, personas: dict[str, Persona]) -> None:
    with app.app_context():
        carol = db.session.get(User, personas["carol"].id)
        assert carol is not None
        carol.status, carol.oidc_subject = "suspended", "sub-1"
        dave = db.session.get(User, personas["dave"].id)
        assert dave is not None
        dave.status, dave.oidc_link_allowed_until = "suspended", utcnow() + timedelta(days=1)
        db.session.commit()
        with pytest.raises(OidcError, match="suspended"):
            sign_in(_oidc(settings), _claims(email="carol@example.com"))
        with pytest.raises(OidcError, match="suspended"):
            sign_in(_oidc(settings), _claims("sub-2", email="dave@example.com"))
    assert _users(app)["dave"].oidc_subject is None  # the permission was not used up either


MAPPING = (("platform", "template-admin"), ("admins", "owner"), ("staff", "member"))


def test_mapped_roles_follow_the_claim_and_others_stay(
    app: Flask, settings: Settings, personas: dict[str, Persona]
) -> None:
    """Only roles the mapping can grant change; alice stays an owner, so erin's owner role may come and go."""
    mapped = _oidc(settings, oidc_role_field="groups", oidc_role_mapping=MAPPING)
    only_owner_mapped = _oidc(settings, oidc_role_field="groups", oidc_role_mapping=(("admins", "owner"),))
    with app.app_context():
        assert sign_in(mapped, _claims(groups=["staff", "platform"])).roles == ["template-admin"]
        assert sign_in(mapped, _claims(groups="admins")).roles == ["owner"]
        assert sign_in(mapped, _claims(groups=[])).roles == []
        assert sign_in(mapped, _claims(groups={"not": "a list"})).roles == []
        erin = sign_in(only_owner_mapped, _claims(groups=["admins"]))
        update_user(db.session.get(User, personas["alice"].id), erin.id, roles=["owner", "template-admin"])
        # template-admin, given by hand, is no mapped role here: a sign-in without any group keeps it.
        assert sign_in(only_owner_mapped, _claims(groups=[])).roles == ["template-admin"]
        assert sign_in(only_owner_mapped, _claims(groups=["admins"])).roles == ["owner", "template-admin"]
        unmapped = sign_in(_oidc(settings), _claims())
        assert unmapped.roles == ["owner", "template-admin"]  # without a mapping roles are left as they are


def test_an_empty_group_claim_never_demotes_the_last_active_owner(
    app: Flask, settings: Settings, personas: dict[str, Persona], caplog: pytest.LogCaptureFixture
) -> None:
    mapped = _oidc(settings, oidc_role_field="groups", oidc_role_mapping=MAPPING)
    with app.app_context():
        alice = db.session.get(User, personas["alice"].id)
        assert alice is not None
        alice.oidc_subject = "alice-at-idp"
        db.session.commit()
        with caplog.at_level(logging.WARNING, logger="app.auth.oidc"):
            user = sign_in(mapped, _claims("alice-at-idp", email="alice@example.com", groups=[]))
        assert user.roles == ["owner"]
        assert "kept the owner role of alice: they are the last active owner" in caplog.text
        # Once another active owner exists, the claim decides again.
        update_user(alice, personas["bob"].id, roles=["owner"])
        assert sign_in(mapped, _claims("alice-at-idp", email="alice@example.com", groups=[])).roles == []


def test_the_first_person_in_stays_owner_when_the_claim_grants_nothing(app: Flask, settings: Settings) -> None:
    mapped = _oidc(settings, oidc_role_field="groups", oidc_role_mapping=MAPPING)
    with app.app_context():
        assert sign_in(mapped, _claims(groups=["platform"])).roles == ["owner", "template-admin"]


def test_oidc_settings_are_checked() -> None:
    env = {"SLIPWAY_OIDC_ISSUER_URL": "https://idp.example/", "SLIPWAY_OIDC_CLIENT_ID": "c"}
    settings = load_settings({**env, "SLIPWAY_OIDC_EMAIL_DOMAIN": "@Corp.example, other.example"})
    assert settings.oidc_issuer_url == "https://idp.example" and settings.oidc_enabled
    assert settings.oidc_email_domains == ("corp.example", "other.example")
    for bad, words in (
        ({"SLIPWAY_OIDC_CLIENT_ID": "c"}, "needed together"),
        ({**env, "SLIPWAY_OIDC_SCOPES": "email"}, "must include openid"),
        ({**env, "SLIPWAY_OIDC_ROLE_MAPPING": "admins=root"}, "idp_value=owner"),
        ({**env, "SLIPWAY_OIDC_ALLOW_SIGNUPS": "maybe"}, "true or false"),
        ({"SLIPWAY_DISABLE_PASSWORD_AUTH": "true"}, "needs OpenID Connect"),
        ({"SLIPWAY_OIDC_ISSUER_URL": "idp", "SLIPWAY_OIDC_CLIENT_ID": "c"}, "http(s) URL"),
    ):
        with pytest.raises(SettingsError, match=words.replace("(", r"\(").replace(")", r"\)")):
            load_settings(bad)
