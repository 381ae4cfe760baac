"""Every route, found by walking the URL map, refuses anonymous callers; public ones are listed on purpose."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.factory import create_app
from tests.conftest import Persona, make_settings
from tests.support.permissions import more_personas, restricted_template
from tests.support.web import csrf_token, sign_in

pytestmark = pytest.mark.databases("sqlite")

# The only routes anyone may call without signing in.
PUBLIC_ENDPOINTS = {
    "static",
    "health.healthz",
    "auth.login",
    "auth.setup",
    "auth.logout",
    "users_api.first_user_exists",
    "users_api.create_first_user",
    "users_api.login",
    "oidc.start",
    "oidc.callback",
    "auth_api.auth_methods",
    # An invitation's and a reset link's pages: the link's secret is the credential.
    "people.accept_invitation",
    "people.forgot_password",
    "people.reset_with_link",
    # Apps decide by their share level (public apps need no sign-in): tests/test_agent_api.py covers each level.
    "apps.app_root",
    "apps.serve_app",
    "apps.serve_app_websocket",
    "apps.serve_app_websocket_path",
    # What a workspace fetches before its agent has any credential; neither holds a secret.
    "agent_bootstrap.init_script",
    "agent_bootstrap.agent_bundle",
    # The sign-in page shows the deployment's name, logo and service banner (its colours are in the stylesheet).
    "appearance_api.get_appearance",
    "appearance.stylesheet",
    # The API reference and its OpenAPI document: the open source server's routes and types, no data, no secret.
    "apidocs.page",
    "apidocs_api.openapi",
}
OWNER_ONLY_ENDPOINTS = {
    "appearance.page",
    "appearance_api.update_appearance",
    "users.index",
    "users.update",
    "users.allow_oidc_link",
    "users_api.list_users",
    "users_api.create_user",
    "users_api.get_user",
    "users_api.update_user",
    "idpsync.page",
    "idpsync_api.get_group_sync",
    "idpsync_api.update_group_sync",
    "idpsync_api.get_role_sync",
    "idpsync_api.update_role_sync",
    "organizations_api.create_organization",
    "organizations_api.update_organization",
    "organizations_api.delete_organization",
    "organizations.create",
    "organizations.edit",
    "organizations.delete",
    # Auditors too (tests/test_connection_log.py).
    "connectionlog.index",
    "connectionlog_api.connection_log",
    "audit.index",
    "audit.export",
    "audit_api.list_entries",
    "audit_api.export",
    "audit_api.verify",
}
# Reading people is also a user admin's (they put people in groups); frank is one.
USER_ADMIN_READS = {"users_api.list_users", "users_api.get_user"}
# Owners and template admins only; members get 403.
ADMIN_ONLY_ENDPOINTS = {
    "provisioners.index",
    "provisioners.jobs",
    "provisioners.live_overview",
    "provisioners.events",
    "provisioners.jobs_events",
    "provisioners.create_key",
    "provisioners.delete_key",
    "provisioners_api.list_daemons",
    "provisioners_api.list_jobs",
    "provisioners_api.create_key",
    "provisioners_api.list_keys",
    "provisioners_api.delete_key",
    "metrics.metrics",
    "catalog_api.download_file",
    # Auditors too, and a template's own admins for their templates (tests/test_insights.py).
    "insights.index",
    "insights_api.daus",
    "insights_api.templates_report",
    "insights_api.user_activity",
    "prebuilds_api.get_settings",
    "prebuilds_api.update_settings",
    "prebuilds_api.status",
    "prebuilds.update_settings",
}
# A template's own: those who may not use it get 404 (it does not exist for them); TEMPLATE_ADMIN_ENDPOINTS also
# refuse (403) those who may use it but do not administer it. Proven on a real template (see below).
TEMPLATE_USE_ENDPOINTS = {
    "catalog.show",
    "catalog.versions_events",
    "catalog_api.get_template",
    "catalog_api.template_by_name",
    "catalog_api.list_versions",
    "catalog_api.version_by_name",
    "catalog_api.get_version",
    "catalog_api.version_parameters",
    "catalog_api.version_presets",
    "catalog_api.version_external_auth",
    "catalog_api.version_resources",
}
TEMPLATE_ADMIN_ENDPOINTS = {
    "catalog.version",
    "catalog.version_log_stream",
    "catalog.retry",
    "catalog.archive",
    "catalog.unarchive",
    "catalog.publish",
    "catalog.archive_failed",
    "catalog.source",
    "catalog.diff",
    "timings_api.version_timings",
    "lifecycle.template_settings",
    "lifecycle_api.update_template",
    "template_acl.show",
    "template_acl.grant",
    "template_acl.remove",
    "catalog_api.version_variables",
    "catalog_api.version_logs",
    "catalog_api.cancel_version",
    "catalog_api.archive_version",
    "catalog_api.unarchive_version",
    "catalog_api.promote_version",
    "catalog_api.archive_versions",
    "template_acl_api.get_acl",
    "template_acl_api.update_acl",
    "template_acl_api.available",
    "template_workspaces.confirm_update_all",
    "template_workspaces.update_all",
    "template_workspaces.notify_outdated",
    # Last: they delete the template.
    "catalog.delete",
    "catalog_api.delete_template",
}
# Owners and user admins only: template admins and members get 403.
GROUP_MANAGER_ENDPOINTS = {
    "groups_api.create_group",
    "groups_api.update_group",
    "groups_api.delete_group",
    "groups.edit",
    "groups.add_member",
    "groups.remove_member",
    "groups.delete",
    # People: invitations and another person's password (one's own password is anyone's: tests/test_people.py).
    "users_api.create_invitation",
    "users_api.list_invitations",
    "users_api.revoke_invitation",
    "users_api.change_password",
    "people.invitations_page",
    "people.revoke_invitation",
    "people.reset_password",
    "people.reset_by_name",
}
# An organisation's own, by what they need of it: "read" (its members, and those who see every organisation: owners,
# auditors, user admins) or "members" (managing them: also its organisation admins and user admins). Those outside
# it get 404 (it does not exist for them); a member who may not manage members gets 403. Proven on a real
# organisation (see below); changing or deleting one is an owner's (OWNER_ONLY_ENDPOINTS).
ORGANIZATION_NEEDS = {
    "organizations_api.get_organization": "read",
    "organizations_api.list_members": "read",
    "organizations_api.add_member": "members",
    "organizations_api.update_member_roles": "members",
    "organizations_api.remove_member": "members",
    "organizations.show": "read",
    "organizations.add_member": "members",
    "organizations.set_roles": "members",
    "organizations.remove_member": "members",
}
# A person's own things only, whoever asks for someone else's (owners included): 403 for the path's other user.
SELF_ONLY_ENDPOINTS = {
    "usersecrets_api.list_secrets",
    "usersecrets_api.create_secret",
    "usersecrets_api.get_secret",
    "usersecrets_api.update_secret",
    "usersecrets_api.delete_secret",
}
# Called by programs: a bad credential is a JSON 401, never a redirect to the login page.
PROGRAM_PATHS = ("/api/", "/metrics")
# Pages a browser visits under /api/ (Coder's paths): signed-out visitors are sent to sign in like any page.
BROWSER_PAGES_UNDER_API = {"applications.auth_redirect"}
# WebSocket routes match upgrade requests only; their guards must refuse before the handshake.
UPGRADE_HEADERS = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}
WEBSOCKET_ENDPOINTS: set[str] = set()


def _routes() -> list[tuple[str, str, str]]:
    """(endpoint, method, path) of every route; building the app touches neither database nor Redis."""
    settings = make_settings(Path(tempfile.gettempdir()), "sqlite://", "unix:///nonexistent")
    routes = []
    for rule in create_app(settings).url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        if rule.websocket:
            WEBSOCKET_ENDPOINTS.add(rule.endpoint)
        path = re.sub(r"<int:\w+>", "1", rule.rule)  # numbers (a port) before the ids
        for argument in rule.arguments:
            path = path.replace(f"<{argument}>", "00000000-0000-0000-0000-000000000000")
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            routes.append((rule.endpoint, method, path))
    return routes


ROUTES = _routes()


def test_public_list_is_exact() -> None:
    endpoints = {endpoint for endpoint, _, _ in ROUTES}
    assert PUBLIC_ENDPOINTS - {"static"} <= endpoints
    assert OWNER_ONLY_ENDPOINTS <= endpoints
    assert ADMIN_ONLY_ENDPOINTS <= endpoints
    assert TEMPLATE_USE_ENDPOINTS | TEMPLATE_ADMIN_ENDPOINTS | GROUP_MANAGER_ENDPOINTS <= endpoints
    assert SELF_ONLY_ENDPOINTS <= endpoints
    organizations = {
        endpoint for endpoint in endpoints if endpoint.startswith(("organizations_api.", "organizations."))
    }
    listed = {"organizations_api.list_organizations", "organizations.index"}  # anyone's: the ones they may see
    assert organizations - set(ORGANIZATION_NEEDS) - OWNER_ONLY_ENDPOINTS == listed


@pytest.mark.parametrize(("endpoint", "method", "path"), [r for r in ROUTES if r[0] not in PUBLIC_ENDPOINTS])
def test_anonymous_callers_are_refused(app: Flask, endpoint: str, method: str, path: str) -> None:
    app.config["WTF_CSRF_ENABLED"] = False  # prove the login check itself, not the CSRF check, refuses
    headers = UPGRADE_HEADERS if endpoint in WEBSOCKET_ENDPOINTS else {}
    response = app.test_client().open(path, method=method, json={}, headers=headers)
    if path.startswith(PROGRAM_PATHS) and endpoint not in BROWSER_PAGES_UNDER_API:
        assert response.status_code == 401, f"{method} {path}"
        assert response.is_json
    else:
        assert response.status_code == 302, f"{method} {path}"
        assert "/login" in response.headers["Location"]


def _refused(app: Flask, personas: dict[str, Persona], persona: str, method: str, path: str) -> None:
    app.config["WTF_CSRF_ENABLED"] = False
    client: FlaskClient = app.test_client()
    if path.startswith(PROGRAM_PATHS):
        response = client.open(path, method=method, json={}, headers=personas[persona].auth)
    else:
        client.post("/login", data={"email": f"{persona}@example.com", "password": personas[persona].password})
        response = client.open(path, method=method, data={})
    assert response.status_code == 403, f"{persona} {method} {path}"


@pytest.mark.parametrize(("endpoint", "method", "path"), [r for r in ROUTES if r[0] in OWNER_ONLY_ENDPOINTS])
@pytest.mark.parametrize("persona", ["bob", "carol"])
def test_non_owners_are_refused_owner_routes(
    app: Flask, personas: dict[str, Persona], persona: str, endpoint: str, method: str, path: str
) -> None:
    _refused(app, personas, persona, method, path)


@pytest.mark.parametrize(("endpoint", "method", "path"), [r for r in ROUTES if r[0] in ADMIN_ONLY_ENDPOINTS])
def test_members_are_refused_admin_routes(
    app: Flask, personas: dict[str, Persona], endpoint: str, method: str, path: str
) -> None:
    _refused(app, personas, "carol", method, path)


@pytest.mark.parametrize(("endpoint", "method", "path"), [r for r in ROUTES if r[0] in SELF_ONLY_ENDPOINTS])
@pytest.mark.parametrize("persona", ["alice", "bob", "carol"])
def test_nobody_reaches_another_persons_own_routes(
    app: Flask, personas: dict[str, Persona], persona: str, endpoint: str, method: str, path: str
) -> None:
    _refused(app, personas, persona, method, path)


@pytest.mark.parametrize(("endpoint", "method", "path"), [r for r in ROUTES if r[0] in GROUP_MANAGER_ENDPOINTS])
@pytest.mark.parametrize("persona", ["bob", "carol"])
def test_only_owners_and_user_admins_manage_groups(
    app: Flask, personas: dict[str, Persona], persona: str, endpoint: str, method: str, path: str
) -> None:
    _refused(app, personas, persona, method, path)


def _template_routes(template: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The template's own routes with its real id, name and active version in the path, deletes last."""
    values = {
        "template_id": template["id"],
        "name": template["name"],
        "version_id": template["active_version_id"],
        "version_name": template["version_name"],
        "org": "default",
    }
    routes = []
    settings = make_settings(Path(tempfile.gettempdir()), "sqlite://", "unix:///nonexistent")
    for rule in create_app(settings).url_map.iter_rules():
        if rule.endpoint not in TEMPLATE_USE_ENDPOINTS | TEMPLATE_ADMIN_ENDPOINTS:
            continue
        path = rule.rule
        for argument in rule.arguments:
            path = path.replace(f"<{argument}>", values[argument])
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            routes.append((rule.endpoint, method, path))
    return sorted(routes, key=lambda route: "delete" in route[0])


# What each of the cast gets on the template only the group ml may use and erin administers: carol (outside the
# group), dave (in it), erin (its admin through the access list) and frank (a user admin: no template rights).
EXPECTED = {
    "carol": {"use": 404, "admin": 404},
    "frank": {"use": 404, "admin": 404},
    "dave": {"use": "allowed", "admin": 403},
    "erin": {"use": "allowed", "admin": "allowed"},
    "bob": {"use": "allowed", "admin": "allowed"},
}


@pytest.mark.parametrize("persona", sorted(EXPECTED))
def test_a_templates_routes_follow_its_access_list(app: Flask, personas: dict[str, Persona], persona: str) -> None:
    app.config["WTF_CSRF_ENABLED"] = False
    api = app.test_client()
    people = more_personas(app, personas)
    template = restricted_template(api, people)
    version = api.get(f"/api/v2/templateversions/{template['active_version_id']}", headers=people["bob"].auth)
    template["version_name"] = version.json["name"]
    page = app.test_client()
    page.post("/login", data={"email": f"{persona}@example.com", "password": people[persona].password})
    wrong = []
    for endpoint, method, path in _template_routes(template):
        expected = EXPECTED[persona]["admin" if endpoint in TEMPLATE_ADMIN_ENDPOINTS else "use"]
        if path.startswith(PROGRAM_PATHS):
            response = api.open(path, method=method, json={}, headers=people[persona].auth)
        else:
            response = page.open(path, method=method, data={})
        status = response.status_code
        response.close()
        if (expected == "allowed" and status in (401, 403, 404)) or (expected != "allowed" and status != expected):
            wrong.append(f"{method} {path}: {status}, expected {expected}")
    assert wrong == []


# What each of the cast gets on organisation acme: bob (a template admin outside it), carol (a plain member of
# it), dave (its user admin) and frank (a user admin of the deployment, outside it).
ORGANIZATION_EXPECTED = {
    "bob": {"read": 404, "members": 404},
    "carol": {"read": "allowed", "members": 403},
    "dave": {"read": "allowed", "members": "allowed"},
    "frank": {"read": "allowed", "members": "allowed"},
}


@pytest.mark.parametrize("persona", sorted(ORGANIZATION_EXPECTED))
def test_an_organizations_routes_follow_its_members_roles(
    app: Flask, personas: dict[str, Persona], persona: str
) -> None:
    app.config["WTF_CSRF_ENABLED"] = False  # the guards are proven, not the CSRF check
    api = app.test_client()
    people = more_personas(app, personas)
    alice = people["alice"].auth
    browser = app.test_client()
    sign_in(browser, f"{persona}@example.com", people[persona].password)
    assert api.post("/api/v2/organizations", json={"name": "acme"}, headers=alice).status_code == 201
    for name in ("carol", "dave", "erin"):
        assert api.post(f"/api/v2/organizations/acme/members/{name}", headers=alice).status_code == 201
    roles = {"roles": ["organization-user-admin"]}
    assert api.put("/api/v2/organizations/acme/members/dave/roles", json=roles, headers=alice).status_code == 200
    wrong = []

    # Removing erin last: the other routes are about her as a member.
    def removes_last(route: tuple[str, str, str]) -> tuple[bool, bool]:  # the page's own, which never 404s, last
        return route[1] == "DELETE" or "remove" in route[0], not route[2].startswith("/api/")

    routes = sorted((r for r in ROUTES if r[0] in ORGANIZATION_NEEDS), key=removes_last)
    for endpoint, method, _ in routes:
        path = RULES[endpoint].replace("<org>", "acme").replace("<user>", "erin")
        if path.startswith(PROGRAM_PATHS):
            response = api.open(path, method=method, json={"roles": []}, headers=people[persona].auth)
        else:
            response = browser.open(path, method=method, data={"username": "erin"})
        status = response.status_code
        expected = ORGANIZATION_EXPECTED[persona][ORGANIZATION_NEEDS[endpoint]]
        if (expected == "allowed" and status in (401, 403, 404)) or (expected != "allowed" and status != expected):
            wrong.append(f"{method} {path}: {status}, expected {expected}")
    assert wrong == []


@pytest.mark.parametrize(
    ("endpoint", "method", "path"), [r for r in ROUTES if r[0] in OWNER_ONLY_ENDPOINTS - USER_ADMIN_READS]
)
def test_user_admins_are_refused_what_only_owners_do(
    app: Flask, personas: dict[str, Persona], endpoint: str, method: str, path: str
) -> None:
    people = more_personas(app, personas)
    _refused(app, people, "frank", method, path)


# Every route about one workspace (its id, one of its builds' or agents'), by what a shared-workspace user needs for
# it: "read" (any share), "use" (any share: connect, start, stop), "act" (an admin share), "owner" (the
# workspace's owner or a deployment owner, whatever the share). Page actions that answer with a flashed refusal
# (retry, confirm, cancel) are guarded at "read" by their loader and decide the rest in their service.
SHARED_WORKSPACE_NEEDS = {
    "workspaces.show": "read",
    "workspaces.change_parameters": "act",
    "workspaces.transition": "use",
    "workspaces.delete": "act",
    "workspaces.build": "read",
    "workspaces.build_log_stream": "read",
    "workspaces.retry": "read",
    "workspaces.confirm": "read",
    "workspaces.cancel": "read",
    "workspaces_api.get_workspace": "read",
    "workspaces_api.list_builds": "read",
    "workspaces_api.create_build": "use",
    "workspaces_api.get_build": "read",
    "workspaces_api.build_resources": "read",
    "workspaces_api.build_parameters": "read",
    "workspaces_api.build_logs": "read",
    "workspaces_api.build_plan": "read",
    "workspaces_api.confirm_build": "act",
    "workspaces_api.cancel_build": "use",
    "workspace_sharing_api.get_acl": "read",
    "workspace_sharing_api.update_acl": "owner",
    "workspace_sharing.update": "owner",
    "lifecycle_api.set_autostart": "act",
    "lifecycle_api.set_ttl": "act",
    "lifecycle_api.set_automatic_updates": "act",
    "lifecycle_api.extend": "act",
    "lifecycle_api.set_dormant": "act",
    "lifecycle.update": "act",
    "lifecycle.schedule": "act",
    "lifecycle.extend": "act",
    "lifecycle.activate": "act",
    "agents_api.get_agent": "read",
    "agents_api.agent_connections": "read",
    "agents_api.agent_logs": "read",
    "agents_api.tunnel": "use",
    "agents.panel": "read",
    "agents.log_stream": "read",
    "agents.terminal": "use",
    "agents.terminal_current": "use",
    "agents_api.listening_ports": "read",
    "timings_api.build_timings": "read",
    "agents_api.list_port_shares": "read",
    "agents_api.share_port": "owner",
    "agents_api.unshare_port": "owner",
    "agents.share_port": "owner",
}
SHARE_ALLOWS = {"use": {"read", "use"}, "admin": {"read", "use", "act"}}
# What each route is sent, so that the request gets past its guard to something harmless.
SHARED_BODIES = {"workspaces.transition": {"transition": "stop"}, "workspaces_api.create_build": {"transition": "stop"}}
WORKSPACE_ARGUMENTS = ("workspace_id", "build_id", "agent_id")


def _workspace_routes() -> list[tuple[str, str, str]]:
    return [route for route in ROUTES if any(f"<{name}>" in _rule_of(route[0]) for name in WORKSPACE_ARGUMENTS)]


def _rule_of(endpoint: str) -> str:
    return RULES[endpoint]


def _rules() -> dict[str, str]:
    settings = make_settings(Path(tempfile.gettempdir()), "sqlite://", "unix:///nonexistent")
    return {rule.endpoint: rule.rule for rule in create_app(settings).url_map.iter_rules()}


RULES = _rules()


def test_every_workspace_route_says_what_a_share_needs() -> None:
    assert {endpoint for endpoint, _, _ in _workspace_routes()} == set(SHARED_WORKSPACE_NEEDS)


@pytest.mark.parametrize("role", ["use", "admin"])
def test_shared_workspace_users_reach_what_their_share_allows(
    app: Flask, personas: dict[str, Persona], role: str
) -> None:
    from tests.test_agent_api import World  # a workspace with a build and an agent, made through the API

    world = World(app, personas)
    dave, carol = personas["dave"], personas["carol"]
    ids = {
        "workspace_id": world.workspace["id"],
        "build_id": world.workspace["latest_build"]["id"],
        "agent_id": world.agent()["id"],
    }
    shared = world.api.patch(
        f"/api/v2/workspaces/{ids['workspace_id']}/acl", json={"user_roles": {dave.id: role}}, headers=carol.auth
    )
    assert shared.status_code == 204, shared.json
    browser = app.test_client()
    sign_in(browser, "dave@example.com", dave.password)
    token = csrf_token(browser, "/workspaces")
    for endpoint, method, _ in _workspace_routes():
        path = _rule_of(endpoint)
        for name, value in ids.items():
            path = path.replace(f"<{name}>", value)
        path = path.replace("<int:port>", "8000")
        body = SHARED_BODIES.get(endpoint, {})
        if path.startswith(PROGRAM_PATHS):
            headers = {**dave.auth, **(UPGRADE_HEADERS if endpoint in WEBSOCKET_ENDPOINTS else {})}
            response = world.api.open(path, method=method, json=body, headers=headers, buffered=False)
        else:
            data = {**body, "csrf_token": token} if method == "POST" else None
            response = browser.open(path, method=method, data=data, buffered=False)
        status = response.status_code
        # A guard's 404 says the thing does not exist for them; a route's own 404 (no plan to review) says more.
        refused_as_absent = status == 404 and "No such workspace" in response.get_data(as_text=True)
        response.close()
        if SHARED_WORKSPACE_NEEDS[endpoint] in SHARE_ALLOWS[role]:
            assert status not in (401, 403) and not refused_as_absent, f"{role} share: {method} {path} -> {status}"
        else:
            assert status == 403, f"{role} share: {method} {path} -> {status}"


# Auditors (the auditor role alone) read everything owners read and change nothing. Writes they may still send:
# signing in and out. Routes not called with a person's credential at all: agents' (an agent token) and apps'
# (decided by the app's share level, and by whether one may use the workspace, which auditors may not).
AUDITOR_MAY_WRITE = {
    "auth.login",
    "auth.logout",
    "auth.logout_everywhere",
    "auth.change_password",
    "users.change_password",
    "users_api.login",
    "users_api.logout",
    "users_api.change_password",
}
NOT_A_PERSONS_ROUTE = ("agent_api.", "apps.", "agent_bootstrap.")


def _auditor(app: Flask, personas: dict[str, Persona]) -> Persona:
    """ivy, an auditor (and nothing else), signed in through the API as the others are."""
    client = app.test_client()
    body = {"username": "ivy", "email": "ivy@example.com", "password": personas["alice"].password}
    created = client.post("/api/v2/users", json=body, headers=personas["alice"].auth)
    assert created.status_code == 201, created.json
    roles = client.patch(
        f"/api/v2/users/{created.json['id']}", json={"roles": ["auditor"]}, headers=personas["alice"].auth
    )
    assert roles.status_code == 200 and "auditor" in roles.json["roles"], roles.json
    login = client.post("/api/v2/users/login", json={"email": body["email"], "password": body["password"]})
    token = login.json["session_token"]
    return Persona(created.json["id"], "ivy", body["email"], body["password"], token)


def _as(app: Flask, person: Persona) -> Callable[[str, str, str], int]:
    """A caller that sends each route as ``person``: bearer token for programs, one signed-in browser for pages."""
    api, browser = app.test_client(), app.test_client()
    browser.post("/login", data={"email": person.email, "password": person.password})

    def send(method: str, path: str, endpoint: str) -> int:
        headers = UPGRADE_HEADERS if endpoint in WEBSOCKET_ENDPOINTS else {}
        if path.startswith(PROGRAM_PATHS) and endpoint not in BROWSER_PAGES_UNDER_API:
            response = api.open(path, method=method, json={}, headers={**person.auth, **headers})
        else:
            response = browser.open(path, method=method, data={}, headers=headers)
        status = response.status_code
        response.close()
        return status

    return send


def test_auditors_change_nothing(app: Flask, personas: dict[str, Persona]) -> None:
    app.config["WTF_CSRF_ENABLED"] = False  # the refusal itself is proven, not the CSRF check
    send = _as(app, _auditor(app, personas))
    wrong = []
    for endpoint, method, path in ROUTES:
        if method in ("GET", "HEAD") or endpoint in AUDITOR_MAY_WRITE | PUBLIC_ENDPOINTS:
            continue
        if endpoint.startswith(NOT_A_PERSONS_ROUTE):
            continue
        status = send(method, path, endpoint)
        if status != 403:
            wrong.append(f"{method} {path}: {status}")
    assert wrong == []


def test_auditors_read_what_owners_read(app: Flask, personas: dict[str, Persona]) -> None:
    send = _as(app, _auditor(app, personas))
    wrong = []
    for endpoint, method, path in ROUTES:
        if method != "GET" or endpoint not in OWNER_ONLY_ENDPOINTS | ADMIN_ONLY_ENDPOINTS:
            continue
        status = send(method, path, endpoint)
        if status in (401, 403):
            wrong.append(f"{method} {path}: {status}")
    assert wrong == []
