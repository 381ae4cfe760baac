"""Git providers (external auth), in-process on SQLite and PostgreSQL against a real OAuth2/OpenID provider (npm
oidc-provider as the generic type, with refresh tokens, revocation and a userinfo endpoint to validate at).

The app's test client is the browser at Slipway; a fresh httpx client is the browser at the provider; the app
talks to the provider itself for the token, refresh, validation and revocation. Builds are run by the stand-in
daemon (the real daemon, agent and git run in test_external_auth_e2e.py).
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.externalauth import services
from app.externalauth.models import ExternalAuthLink
from app.users.models import User
from tests.conftest import Persona, make_settings
from tests.support.daemon import PSK, FakeDaemon, import_template
from tests.support.net import free_port
from tests.support.oidc import OidcProvider, git_provider_client, provider_sign_in
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

RP_URL = "http://localhost"
CLIENT = git_provider_client(RP_URL, "idp", "slipway-git", "git-secret")
DEVICE_CLIENT = {
    "client_id": "slipway-device",
    "client_secret": "device-secret",
    "redirect_uris": [],
    "response_types": [],
    "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
    "token_endpoint_auth_method": "client_secret_post",
}
AGENT_TOKEN = "5c0ffee0-0000-4000-8000-00000000a9e7"
AGENT_HEADERS = {"Slipway-Agent-Token": AGENT_TOKEN}
REPO = "https://git.example.test/team/private.git"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    log = tmp_path_factory.mktemp("idp") / "idp.log"
    with OidcProvider(RP_URL, {}, log_path=log, extra_clients=[CLIENT, DEVICE_CLIENT]) as idp:
        yield idp


def provider_env(idp: OidcProvider, number: int = 0, **extra: str) -> dict[str, str]:
    fields = {
        "ID": "idp",
        "TYPE": "oauth2",
        "DISPLAY_NAME": "Team Git",
        "CLIENT_ID": CLIENT["client_id"],
        "CLIENT_SECRET": CLIENT["client_secret"],
        "AUTH_URL": f"{idp.issuer}/auth",
        "TOKEN_URL": f"{idp.issuer}/token",
        "VALIDATE_URL": f"{idp.issuer}/me",
        "REVOKE_URL": f"{idp.issuer}/token/revocation",
        "SCOPES": "openid profile",
        "REGEX": r"^https://git\.example\.test(/.*)?$",
        **extra,
    }
    return {f"EXTERNAL_AUTH_{number}_{key}": value for key, value in fields.items()}


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str, provider: OidcProvider) -> Settings:
    # A second provider whose endpoints nothing listens on: "the provider is down".
    down = f"http://127.0.0.1:{free_port()}"
    env = {
        **provider_env(provider),
        **{
            f"EXTERNAL_AUTH_1_{key}": value
            for key, value in {
                "ID": "down", "TYPE": "gitlab", "CLIENT_ID": "x", "CLIENT_SECRET": "y",
                "AUTH_URL": f"{down}/oauth/authorize", "TOKEN_URL": f"{down}/oauth/token",
                "VALIDATE_URL": f"{down}/user", "REVOKE_URL": f"{down}/revoke",
            }.items()
        },
    }  # fmt: skip
    return make_settings(tmp_path, database_url, redis_server, access_url=RP_URL, provisioner_daemon_psk=PSK, **env)


def browser(app: Flask, persona: Persona) -> FlaskClient:
    client = app.test_client()
    sign_in(client, persona.email, persona.password)
    return client


def link(client: FlaskClient, login: str, provider_id: str = "idp") -> Any:
    """Link as the provider's user ``login``; Slipway's callback response."""
    start = client.get(f"/external-auth/{provider_id}")
    assert start.status_code == 302, start.get_data(as_text=True)
    assert "code_challenge_method=S256" in start.headers["Location"] and "state=" in start.headers["Location"]
    with httpx.Client(follow_redirects=False, timeout=30) as at_provider:
        callback = provider_sign_in(at_provider, start.headers["Location"], login, RP_URL)
    response = client.get(callback.removeprefix(RP_URL))
    response.callback_url = callback  # type: ignore[attr-defined]
    return response


def stored_link(app: Flask, persona: Persona) -> ExternalAuthLink:
    with app.app_context():
        row = db.session.query(ExternalAuthLink).filter_by(user_id=persona.id, provider_id="idp").one()
        db.session.expunge(row)
        return row


def valid_at_provider(idp: OidcProvider, token: str) -> bool:
    return httpx.get(f"{idp.issuer}/me", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 200


def statuses(client: FlaskClient, persona: Persona) -> dict[str, dict[str, Any]]:
    reply = client.get("/api/v2/external-auth", headers=persona.auth)
    assert reply.status_code == 200, reply.json
    return {row["id"]: row for row in reply.json}


def test_linking_stores_the_tokens_encrypted_and_unlinking_revokes_them(
    app: Flask, personas: dict[str, Persona], provider: OidcProvider
) -> None:
    carol = personas["carol"]
    client = browser(app, carol)
    assert statuses(client, carol)["idp"]["authenticated"] is False
    done = link(client, "carol-at-git")
    assert done.status_code == 302 and done.headers["Location"].endswith("/account#git-providers")
    row = statuses(client, carol)["idp"]
    assert row["authenticated"] is True and row["validate_error"] == "" and "access_token" not in row
    stored = stored_link(app, carol)
    assert valid_at_provider(provider, stored.access_token) and stored.refresh_token
    # The table holds no token in clear.
    with app.app_context():
        raw = db.session.execute(text("SELECT access_token, refresh_token FROM external_auth_links")).one()
    for column, token in zip(raw, (stored.access_token, stored.refresh_token), strict=True):
        assert bytes(column).startswith(b"enc1:") and token.encode() not in bytes(column)
    page = client.get("/account")
    assert 'id="git-providers"' in page.text and "linked" in page.text and stored.access_token not in page.text

    # A replayed callback (same state, same code) is refused, and the link stays as it was.
    replay = client.get(done.callback_url.removeprefix(RP_URL))
    assert replay.status_code == 400 and "already used" in replay.text
    # So is one with a state this browser never started (a forged or cross-site callback).
    forged = client.get("/external-auth/idp/callback?state=forged&code=abc")
    assert forged.status_code == 400

    # Unlink: a form with CSRF (refused without), then the tokens are dead at the provider.
    assert client.post("/external-auth/idp/unlink").status_code == 400
    unlinked = post_form(client, "/external-auth/idp/unlink", {}, token_from="/account")
    assert unlinked.status_code == 302
    assert statuses(client, carol)["idp"]["linked"] is False
    assert not valid_at_provider(provider, stored.access_token)


def flows_kept(app: Flask) -> int:
    """How many browser sessions have Git links under way on the server."""
    from app.externalauth.flows import KEY

    with app.app_context():
        from app.core.redis_client import get_redis

        return len(list(get_redis().scan_iter(KEY.format("*"))))


def test_a_link_started_before_a_sign_out_does_not_complete_into_the_next_persons_account(
    app: Flask, personas: dict[str, Persona], provider: OidcProvider
) -> None:
    carol, dave = personas["carol"], personas["dave"]
    shared = browser(app, carol)  # one browser, two people
    start = shared.get("/external-auth/idp")
    kept_while_signed_in = flows_kept(app)
    assert post_form(shared, "/logout", {}, token_from="/account").status_code == 302
    kept_after_sign_out = flows_kept(app)
    sign_in(shared, dave.email, dave.password)
    with httpx.Client(follow_redirects=False, timeout=30) as at_provider:
        callback = provider_sign_in(at_provider, start.headers["Location"], "carol-at-git", RP_URL)
    refused = shared.get(callback.removeprefix(RP_URL))
    assert refused.status_code == 400 and "not started by you" in refused.text
    assert statuses(shared, dave)["idp"]["linked"] is False
    assert statuses(shared, carol)["idp"]["linked"] is False
    # The flow was kept on the server, and signing out dropped it.
    assert (kept_while_signed_in, kept_after_sign_out) == (1, 0)


def test_a_callback_replayed_with_the_cookie_from_before_the_first_and_a_fresh_code_is_refused(
    app: Flask, personas: dict[str, Persona], provider: OidcProvider
) -> None:
    carol = personas["carol"]
    client = browser(app, carol)
    start = client.get("/external-auth/idp")
    cookie = client.get_cookie("slipway_session")
    assert cookie is not None
    before_callback = cookie.value
    with httpx.Client(follow_redirects=False, timeout=30) as at_provider:
        first = provider_sign_in(at_provider, start.headers["Location"], "carol-at-git", RP_URL)
    assert client.get(first.removeprefix(RP_URL)).status_code == 302
    first_token = stored_link(app, carol).access_token
    # The cookie as it was before the callback, and a fresh code for the same state from the provider.
    client.set_cookie("slipway_session", before_callback, domain=cookie.domain)
    with httpx.Client(follow_redirects=False, timeout=30) as at_provider:
        second = provider_sign_in(at_provider, start.headers["Location"], "mallory-at-git", RP_URL)
    assert second != first
    replay = client.get(second.removeprefix(RP_URL))
    assert replay.status_code == 400 and "already used" in replay.text
    assert stored_link(app, carol).access_token == first_token


def test_a_callback_in_another_persons_browser_is_refused(
    app: Flask, personas: dict[str, Persona], provider: OidcProvider
) -> None:
    carol, dave = personas["carol"], personas["dave"]
    start = browser(app, carol).get("/external-auth/idp")
    with httpx.Client(follow_redirects=False, timeout=30) as at_provider:
        callback = provider_sign_in(at_provider, start.headers["Location"], "carol-at-git", RP_URL)
    daves = browser(app, dave)  # carol's callback URL, opened by dave (sent to him, or a forged link)
    assert daves.get(callback.removeprefix(RP_URL)).status_code == 400
    assert statuses(daves, dave)["idp"]["linked"] is False


def test_an_expiring_token_is_refreshed_and_a_revoked_one_shows_as_invalid(
    app: Flask, personas: dict[str, Persona], provider: OidcProvider
) -> None:
    dave = personas["dave"]
    client = browser(app, dave)
    link(client, "dave-at-git")
    first = stored_link(app, dave)
    with app.app_context():
        db.session.query(ExternalAuthLink).update({ExternalAuthLink.expires_at: utcnow() + timedelta(minutes=2)})
        db.session.commit()
    assert statuses(client, dave)["idp"]["authenticated"] is True
    refreshed = stored_link(app, dave)
    assert refreshed.access_token != first.access_token and valid_at_provider(provider, refreshed.access_token)
    assert refreshed.expires_at is not None and refreshed.expires_at > utcnow() + timedelta(minutes=30)

    # Revoked at the provider (the person removed the app there): the next look says "token invalid", no 500.
    for token in (refreshed.refresh_token, refreshed.access_token):
        httpx.post(f"{provider.issuer}/token/revocation", data={"token": token, **_client_auth()}, timeout=10)
    with app.app_context():
        db.session.query(ExternalAuthLink).update({ExternalAuthLink.expires_at: utcnow() - timedelta(minutes=1)})
        db.session.commit()
    row = statuses(client, dave)["idp"]
    assert row["authenticated"] is False and row["linked"] is True and row["validate_error"]
    page = client.get("/account")
    assert page.status_code == 200 and "token invalid" in page.text and "Relink" in page.text
    # Relinking makes it good again.
    link(client, "dave-at-git")
    assert statuses(client, dave)["idp"]["authenticated"] is True


def test_concurrent_requests_refresh_a_rotating_token_once(app: Flask, personas: dict[str, Persona]) -> None:
    """git fetching submodules in parallel asks for the token several times at once; the provider rotates refresh
    tokens (each works once), so only one request may refresh and the others must take its result."""
    carol = personas["carol"]
    link(browser(app, carol), "carol-at-git")
    with app.app_context():
        db.session.query(ExternalAuthLink).update({ExternalAuthLink.expires_at: utcnow() + timedelta(minutes=1)})
        db.session.commit()
    before = stored_link(app, carol)
    tokens: list[str] = []

    def ask() -> None:
        with app.app_context():
            reply = services.agent_token(db.session.get(User, carol.id), provider_id="idp")
            tokens.append(reply.access_token)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    after = stored_link(app, carol)
    assert after.validate_error == "" and after.access_token != before.access_token
    assert tokens == [after.access_token] * 4


def _client_auth() -> dict[str, str]:
    return {"client_id": CLIENT["client_id"], "client_secret": CLIENT["client_secret"]}


def test_a_provider_that_is_down_gets_a_page_saying_so_and_shows_in_its_health(
    app: Flask, personas: dict[str, Persona]
) -> None:
    carol, alice = personas["carol"], personas["alice"]
    client = browser(app, carol)
    start = client.get("/external-auth/down")
    assert start.status_code == 302
    state = start.headers["Location"].split("state=")[1].split("&")[0]
    callback = client.get(f"/external-auth/down/callback?state={state}&code=whatever")
    assert callback.status_code == 502 and "did not answer" in callback.text and "Try again" in callback.text
    overview = client.get("/api/v2/external-auth/providers", headers=alice.auth)
    assert overview.status_code == 200
    down = next(row for row in overview.json if row["id"] == "down")
    assert down["healthy"] is False and down["last_error"] and down["links"] == 0
    admin_page = browser(app, alice).get("/external-auth")
    assert admin_page.status_code == 200 and "Team Git" in admin_page.text and "error" in admin_page.text


@pytest.mark.parametrize(
    ("persona", "status"), [("alice", 200), ("bob", 200), ("carol", 403), ("dave", 403), (None, 401)]
)
def test_only_admins_see_the_providers_overview(
    app: Flask, personas: dict[str, Persona], persona: str | None, status: int
) -> None:
    client = app.test_client()
    headers = personas[persona].auth if persona else {}
    reply = client.get("/api/v2/external-auth/providers", headers=headers)
    assert reply.status_code == status
    if persona:
        sign_in(client, personas[persona].email, personas[persona].password)
    page = client.get("/external-auth")
    assert page.status_code == (302 if persona is None else status)
    if status == 200:
        assert all("access_token" not in row for row in reply.json)


def test_a_template_needing_a_provider_refuses_create_until_linked_then_builds_get_the_token(
    app: Flask, personas: dict[str, Persona], provider: OidcProvider
) -> None:
    api = app.test_client()
    daemon = FakeDaemon(api)
    template = import_template(api, personas, daemon, external_auth=[{"id": "idp"}, {"id": "down", "optional": True}])
    carol, dave = personas["carol"], personas["dave"]
    needs = api.get(f"/api/v2/templateversions/{template['active_version_id']}/external-auth", headers=carol.auth)
    assert needs.status_code == 200
    assert [(row["id"], row["optional"], row["authenticated"]) for row in needs.json] == [
        ("idp", False, False),
        ("down", True, False),
    ]
    body = {"template_id": template["id"], "name": "w1", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    refused = api.post("/api/v2/workspaces", json=body, headers=carol.auth)
    assert refused.status_code == 400
    assert [item["field"] for item in refused.json["validations"]] == ["external_auth.idp"]
    assert "/external-auth/idp" in refused.json["validations"][0]["detail"]
    carol_browser = browser(app, carol)
    form = carol_browser.get(f"/workspaces/new?template={template['name']}")
    assert 'id="external-auth"' in form.text and "/external-auth/idp?redirect=" in form.text

    link(carol_browser, "carol-at-git")
    link(browser(app, dave), "dave-at-git")
    created = api.post("/api/v2/workspaces", json=body, headers=carol.auth)
    assert created.status_code == 201, created.json
    job_id = created.json["latest_build"]["job"]["id"]
    acquired = daemon.call(f"/jobs/{job_id}/acquire")
    carol_token = stored_link(app, carol).access_token
    assert acquired.json["workspace_build"]["external_auth_tokens"] == {"idp": carol_token}
    # Not in the job's stored input, and masked in its log.
    with app.app_context():
        rows = db.session.execute(text("SELECT * FROM provisioner_jobs")).all()
    assert all(carol_token not in repr(row) for row in rows)
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Apply", "output": f"cloning with {carol_token}"}]})
    logs = api.get(f"/api/v2/workspacebuilds/{created.json['latest_build']['id']}/logs", headers=carol.auth)
    assert carol_token not in logs.get_data(as_text=True) and "cloning with" in logs.get_data(as_text=True)
    agent = {"name": "main", "os": "linux", "arch": "amd64", "token": AGENT_TOKEN}
    done = daemon.call(
        f"/jobs/{job_id}/complete",
        {"workspace_build": {"state": base64.b64encode(b"{}").decode(), "resources": [
            {"name": "dev", "type": "terraform_data", "agents": [agent]}]}},
    )  # fmt: skip
    assert done.status_code == 204, done.json

    # The workspace's agent gets its owner's token for a URL the provider serves — carol's, never dave's.
    reply = api.get(f"/api/v2/workspaceagents/me/external-auth?match={REPO}", headers=AGENT_HEADERS)
    assert reply.status_code == 200, reply.json
    assert reply.json["access_token"] == carol_token == reply.json["password"]
    assert reply.json["username"] == "oauth2" and reply.json["url"] == ""
    assert stored_link(app, dave).access_token != carol_token
    unknown = api.get("/api/v2/workspaceagents/me/external-auth?match=https://elsewhere.test/x", headers=AGENT_HEADERS)
    assert unknown.status_code == 404 and "No Git provider" in unknown.json["message"]
    assert api.get(f"/api/v2/workspaceagents/me/external-auth?match={REPO}").status_code == 401
    # Not linked (the optional one): the URL to link at instead of a token.
    down = api.get("/api/v2/workspaceagents/me/external-auth?id=down", headers=AGENT_HEADERS)
    assert down.json["access_token"] == "" and down.json["url"] == f"{RP_URL}/external-auth/down"
    # The owner's Git SSH key reaches the agent; the API shows people only the public half.
    key = api.get("/api/v2/workspaceagents/me/gitsshkey", headers=AGENT_HEADERS).json
    assert key["private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert api.get("/api/v2/users/me/gitsshkey", headers=carol.auth).json == {"public_key": key["public_key"]}

    # A suspended owner's workspace hands out none of their credentials.
    alice = personas["alice"]
    assert api.patch(f"/api/v2/users/{carol.id}", json={"status": "suspended"}, headers=alice.auth).status_code == 200
    refused_key = api.get("/api/v2/workspaceagents/me/gitsshkey", headers=AGENT_HEADERS)
    assert refused_key.status_code == 403 and "suspended" in refused_key.json["message"]
    assert api.patch(f"/api/v2/users/{carol.id}", json={"status": "active"}, headers=alice.auth).status_code == 200
    login = api.post("/api/v2/users/login", json={"email": carol.email, "password": carol.password})
    carol = replace(carol, token=login.json["session_token"])  # suspension ended her sessions

    # Starting again after unlinking is refused before any job is queued.
    api.post(f"/api/v2/workspaces/{created.json['id']}/builds", json={"transition": "stop"}, headers=carol.auth)
    stop_job = api.get(f"/api/v2/workspaces/{created.json['id']}", headers=carol.auth).json["latest_build"]["job"]
    daemon.call(f"/jobs/{stop_job['id']}/acquire")
    daemon.call(f"/jobs/{stop_job['id']}/complete", {"workspace_build": {}})
    assert api.delete("/api/v2/external-auth/idp", headers=carol.auth).status_code == 204
    start = api.post(
        f"/api/v2/workspaces/{created.json['id']}/builds", json={"transition": "start"}, headers=carol.auth
    )
    assert start.status_code == 400 and start.json["validations"][0]["field"] == "external_auth.idp"


def test_the_git_ssh_key_is_made_once_regenerated_on_request_and_encrypted(
    app: Flask, personas: dict[str, Persona]
) -> None:
    carol = personas["carol"]
    api = app.test_client()
    first = api.get("/api/v2/users/me/gitsshkey", headers=carol.auth).json["public_key"]
    assert first.startswith("ssh-ed25519 ") and first.endswith(" slipway-carol")
    assert api.get("/api/v2/users/me/gitsshkey", headers=carol.auth).json["public_key"] == first
    second = api.put("/api/v2/users/me/gitsshkey", headers=carol.auth).json["public_key"]
    assert second != first
    client = browser(app, carol)
    assert second in client.get("/account").text
    assert post_form(client, "/account/gitsshkey", {}, token_from="/account").status_code == 302
    assert api.get("/api/v2/users/me/gitsshkey", headers=carol.auth).json["public_key"] not in (first, second)
    with app.app_context():
        raw = db.session.execute(text("SELECT private_key FROM git_ssh_keys")).scalar_one()
    assert bytes(raw).startswith(b"enc1:") and b"OPENSSH" not in bytes(raw)
    assert api.get("/api/v2/users/me/gitsshkey").status_code == 401


def test_tokens_stay_readable_after_a_key_rotation(
    tmp_path: Path, database_url: str, redis_server: str, provider: OidcProvider, app_factory: Any
) -> None:
    old_key, new_key = base64.b64encode(b"o" * 32).decode(), base64.b64encode(b"n" * 32).decode()
    env = provider_env(provider)
    first = app_factory(make_settings(tmp_path, database_url, redis_server, encryption_keys=old_key, **env))
    with first.app_context():
        from app.users import services as users

        user = users.create_user("erin", "erin@example.com", "a-long-password", [])
        db.session.add(ExternalAuthLink(user_id=user.id, provider_id="idp", access_token="tok-old", validate_error=""))
        db.session.commit()
    rotated = app_factory(
        make_settings(tmp_path, database_url, redis_server, encryption_keys=f"{new_key},{old_key}", **env)
    )
    with rotated.app_context():
        assert db.session.query(ExternalAuthLink).one().access_token == "tok-old"
    # The same keys under Coder's name work too.
    coder_named = app_factory(
        make_settings(tmp_path, database_url, redis_server, external_token_encryption_keys=f"{new_key},{old_key}")
    )
    with coder_named.app_context():
        assert db.session.query(ExternalAuthLink).one().access_token == "tok-old"


INPUT = re.compile(r"<input[^>]*>", re.IGNORECASE)
ATTRIBUTE = re.compile(r'(name|value)="([^"]*)"')
FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"', re.IGNORECASE)


def approve_device(verification_uri: str, user_code: str, login: str) -> None:
    """At the provider, as the person would in another browser: enter the code, sign in, confirm."""
    with httpx.Client(follow_redirects=True, timeout=30) as at_provider:
        page = at_provider.get(verification_uri)
        for _ in range(6):
            action = FORM_ACTION.search(page.text)
            if action is None:
                break
            inputs = [dict(ATTRIBUTE.findall(tag)) for tag in INPUT.findall(page.text)]
            fields = {field["name"]: field.get("value", "") for field in inputs if "name" in field}
            if "user_code" in fields:
                fields["user_code"] = user_code
            if "login" in fields:
                fields.update(login=login, password="any-password")
            if "confirm" in page.text:
                fields["confirm"] = "yes"
            page = at_provider.post(urljoin(str(page.url), action.group(1)), data=fields)
        assert page.status_code == 200 and "Sign-in Success" in page.text, page.text[:500]


def test_the_device_flow_links_with_a_code_entered_at_the_provider(
    tmp_path: Path, database_url: str, redis_server: str, provider: OidcProvider, app_factory: Any
) -> None:
    env = provider_env(
        provider, CLIENT_ID=DEVICE_CLIENT["client_id"], CLIENT_SECRET=DEVICE_CLIENT["client_secret"],
        DEVICE_FLOW="true", DEVICE_CODE_URL=f"{provider.issuer}/device/auth",
    )  # fmt: skip
    app = app_factory(make_settings(tmp_path, database_url, redis_server, access_url=RP_URL, **env))
    with app.app_context():
        from app.users import services as users

        users.create_user("erin", "erin@example.com", "a-long-password", [])
    client = app.test_client()
    sign_in(client, "erin@example.com", "a-long-password")
    start = client.get("/external-auth/idp")
    assert start.status_code == 302 and "/external-auth/idp/device" in start.headers["Location"]
    page = client.get(start.headers["Location"])
    assert page.status_code == 200, page.text
    user_code = re.search(r'id="device-user-code">([^<]+)<', page.text)
    verification = re.search(r'<a href="([^"]+)" target="_blank"', page.text)
    assert user_code and verification
    waiting = post_form(client, "/external-auth/idp/device", {"back": "/account"}, token_from="/account")
    assert waiting.status_code == 200 and "Waiting for you to approve" in waiting.text
    approve_device(verification.group(1), user_code.group(1), "erin-at-git")
    linked = post_form(client, "/external-auth/idp/device", {"back": "/account"}, token_from="/account")
    assert "Linked your Team Git account" in linked.text
    with app.app_context():
        link = db.session.query(ExternalAuthLink).one()
        assert valid_at_provider(provider, link.access_token)
