"""Groups and roles from the identity provider, in-process on both databases against the real OpenID provider
(tests/oidc): the settings API (Coder's shapes, owners only), sign-ins that put people in groups and take them out
again, created groups, the regex filter, role mapping, and manual changes of synced groups refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.config import Settings
from app.core.errors import Conflict
from app.core.extensions import db
from app.groups.models import SOURCE_OIDC, SOURCE_USER, Group, GroupMember
from app.groups.sync import refuse_manual_change
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.users.models import User
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.oidc import CLIENT_ID, CLIENT_SECRET, OidcProvider, provider_sign_in
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

RP_URL = "http://localhost"  # the test client's own base URL, so the provider's redirect lands on the app
GROUPS = "/api/v2/organizations/default/settings/idpsync/groups"
ROLES = "/api/v2/organizations/default/settings/idpsync/roles"


@pytest.fixture(scope="module")
def accounts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("idp-accounts") / "accounts.json"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory, accounts_file: Path) -> Iterator[OidcProvider]:
    log_path = tmp_path_factory.mktemp("idp") / "idp.log"
    with OidcProvider(RP_URL, log_path=log_path, accounts_file=accounts_file) as idp:
        yield idp


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str, provider: OidcProvider) -> Settings:
    return make_settings(
        tmp_path,
        database_url,
        redis_server,
        access_url=RP_URL,
        oidc_issuer_url=provider.issuer,
        oidc_client_id=CLIENT_ID,
        oidc_client_secret=CLIENT_SECRET,
    )


def set_claims(accounts_file: Path, login: str, **claims: Any) -> None:
    """What the provider says about ``login`` at their next sign-in."""
    profile = {"email": f"{login}@example.com", "email_verified": True, "preferred_username": login, **claims}
    accounts_file.write_text(json.dumps({login: profile}))


def oidc_sign_in(app: Flask, login: str) -> FlaskClient:
    client = app.test_client()
    redirect = client.get("/login/oidc")
    assert redirect.status_code == 302, redirect.get_data(as_text=True)
    with httpx.Client(follow_redirects=False, timeout=30) as browser_at_provider:
        callback = provider_sign_in(browser_at_provider, redirect.headers["Location"], login, RP_URL)
    landed = client.get(callback.removeprefix(RP_URL))
    assert landed.status_code == 302, landed.get_data(as_text=True)
    return client


def groups_of(app: Flask, username: str) -> list[str]:
    with app.app_context():
        return sorted(
            db.session.scalars(
                select(Group.name)
                .join(GroupMember, GroupMember.group_id == Group.id)
                .join(User, User.id == GroupMember.user_id)
                .where(User.username == username)
            )
        )


def make_group(app: Flask, name: str, source: str = SOURCE_USER) -> str:
    with app.app_context():
        group = Group(organization_id=DEFAULT_ORGANIZATION_ID, name=name, source=source)
        db.session.add(group)
        db.session.commit()
        return group.id


def test_a_groups_claim_puts_the_person_in_ml_and_its_removal_takes_them_out(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], accounts_file: Path
) -> None:
    owner = personas["alice"].auth
    body = {"field": "groups", "mapping": {}, "regex_filter": None, "auto_create_missing_groups": True}
    reply = client.patch(GROUPS, json=body, headers=owner)
    assert reply.status_code == 200 and reply.json == body
    assert client.get(GROUPS, headers=owner).json == body

    set_claims(accounts_file, "erin", groups=["ml"])
    oidc_sign_in(app, "erin")
    assert groups_of(app, "erin") == ["ml"]
    with app.app_context():
        ml = db.session.scalar(select(Group).where(Group.name == "ml"))
        assert ml is not None and ml.source == SOURCE_OIDC  # created for the claim
        with pytest.raises(Conflict, match="synced from the identity provider"):
            refuse_manual_change(ml)

    set_claims(accounts_file, "erin")  # the provider no longer says "groups" at all
    oidc_sign_in(app, "erin")
    assert groups_of(app, "erin") == []


def test_mapping_regex_and_hand_made_groups(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], accounts_file: Path
) -> None:
    gpu = make_group(app, "gpu-users")
    make_group(app, "data")  # by hand, same name as an IdP group: joined by name, never emptied by sync
    body = {"field": "groups", "mapping": {"nvidia": [gpu]}, "regex_filter": "^(nvidia|data|ops)$"}
    assert client.patch(GROUPS, json=body, headers=personas["alice"].auth).status_code == 200

    set_claims(accounts_file, "frank", groups=["nvidia", "data", "unrelated"])
    oidc_sign_in(app, "frank")
    assert groups_of(app, "frank") == ["data", "gpu-users"]  # no auto-create: "unrelated" is dropped anyway

    set_claims(accounts_file, "frank", groups=["ops"])
    oidc_sign_in(app, "frank")
    assert groups_of(app, "frank") == ["data"]  # the mapped group follows the claim; the hand-made one stays


def test_roles_follow_the_mapped_claim(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], accounts_file: Path
) -> None:
    body = {"field": "roles", "mapping": {"tadmin": ["template-admin"], "people": ["user-admin"]}}
    reply = client.patch(ROLES, json=body, headers=personas["alice"].auth)
    assert reply.status_code == 200 and reply.json == body
    set_claims(accounts_file, "gina", roles=["tadmin", "people"])
    oidc_sign_in(app, "gina")
    with app.app_context():
        gina = db.session.scalar(select(User).where(User.username == "gina"))
        assert gina is not None and gina.roles == ["template-admin", "user-admin"]
    set_claims(accounts_file, "gina", roles=["people"])
    oidc_sign_in(app, "gina")
    with app.app_context():
        gina = db.session.scalar(select(User).where(User.username == "gina"))
        assert gina is not None and gina.roles == ["user-admin"]


def test_settings_are_for_owners_and_checked(client: FlaskClient, personas: dict[str, Persona]) -> None:
    for persona in ("bob", "carol"):
        assert client.get(GROUPS, headers=personas[persona].auth).status_code == 403
        assert client.patch(ROLES, json={}, headers=personas[persona].auth).status_code == 403
    owner = personas["alice"].auth
    missing = "00000000-0000-4000-8000-0000000000ff"
    bad = {"field": 7, "mapping": {"x": [missing]}, "regex_filter": "(", "auto_create_missing_groups": "yes"}
    reply = client.patch(GROUPS, json=bad, headers=owner)
    assert reply.status_code == 400
    assert {item["field"] for item in reply.json["validations"]} == {
        "field", "mapping.x", "regex_filter", "auto_create_missing_groups",
    }  # fmt: skip
    reply = client.patch(ROLES, json={"field": "roles", "mapping": {"x": ["member", "owner"]}}, headers=owner)
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "mapping.x"
    assert client.patch(ROLES, json={"mapping": "x"}, headers=owner).status_code == 400
    assert client.get("/api/v2/organizations/nope/settings/idpsync/roles", headers=owner).status_code == 404
    assert client.get(ROLES, headers=owner).json == {"field": "", "mapping": {}}


def test_the_admin_page_sets_group_sync_by_group_name(app: Flask, personas: dict[str, Persona]) -> None:
    make_group(app, "gpu-users")
    browser = app.test_client()
    sign_in(browser, "alice@example.com", PASSWORD)
    form = {"which": "groups", "field": "groups", "mapping": "nvidia = gpu-users\n", "regex_filter": "^nv"}
    assert post_form(browser, "/admin/idp-sync", form).status_code == 302
    page = browser.get("/admin/idp-sync").get_data(as_text=True)
    assert "nvidia = gpu-users" in page and 'value="^nv"' in page
    wrong = post_form(browser, "/admin/idp-sync", {**form, "mapping": "nvidia = nope"})
    assert wrong.status_code == 400 and "No group nope in the organisation." in wrong.get_data(as_text=True)
    roles = {"which": "roles", "field": "roles", "mapping": "boss = owner, wizard"}
    refused = post_form(browser, "/admin/idp-sync", roles)
    assert refused.status_code == 400 and "&#39;wizard&#39; is not one of" in refused.get_data(as_text=True)
    member = app.test_client()
    sign_in(member, "carol@example.com", PASSWORD)
    assert member.get("/admin/idp-sync").status_code == 403
