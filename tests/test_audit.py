"""The audit log: every write the API has leaves its entry with the right actor and diff (one table, walked in
order on a real deployment in process), secrets never reach a row, an export or the page, and the filter, paging,
exports and the CLI's server side answer as documented. Both databases: the entries are written under the chain
head's row lock, and the filters are SQL."""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select
from werkzeug.test import TestResponse

from app.audit.models import AuditLog
from app.audit.recorder import exemptions, registry
from app.core.config import Settings
from app.core.extensions import Base, db
from app.factory import create_app
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.archives import tar_of
from tests.support.daemon import RESOURCES, FakeDaemon, push_version
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

SECRET_VALUE = "sw0rdfish-audit-canary"
SECRET_VALUE_2 = "sw0rdfish-audit-canary-two"
AGENT = {"name": "main", "os": "linux", "arch": "amd64", "token": "5b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"}


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    """The usual test settings, with a Git provider configured (for its link's unlinking)."""
    return make_settings(
        tmp_path, database_url, redis_server, provisioner_daemon_psk="test-daemon-psk",
        external_auth_0_id="github", external_auth_0_client_id="Iv1.abc", external_auth_0_client_secret="s3cret",
    )  # fmt: skip


@dataclass
class World:
    """What the cases build on, filled in as they run."""

    app: Flask
    api: FlaskClient
    people: dict[str, Persona]
    daemon: FakeDaemon | None = None
    ids: dict[str, str] = field(default_factory=dict)

    def call(self, method: str, path: str, persona: str | None, body: Any = None, **headers: str) -> TestResponse:
        auth = self.people[persona].auth if persona else {}
        return self.api.open(f"/api/v2{path}", method=method, json=body, headers={**auth, **headers})

    def complete_import(self, version: dict[str, Any]) -> None:
        assert self.daemon is not None
        job = version["job"]["id"]
        assert self.daemon.call(f"/jobs/{job}/acquire").status_code == 200
        done = self.daemon.call(f"/jobs/{job}/complete", {"template_import": {"resources": RESOURCES}})
        assert done.status_code == 204, done.json

    def complete_build(self, build: dict[str, Any]) -> None:
        assert self.daemon is not None
        job = build["job"]["id"]
        assert self.daemon.call(f"/jobs/{job}/acquire").status_code == 200
        body = {"state": base64.b64encode(b"{}").decode(), "resources": [{"name": "dev", "type": "terraform_data",
                                                                             "agents": [AGENT]}]}  # fmt: skip
        assert self.daemon.call(f"/jobs/{job}/complete", {"workspace_build": body}).status_code == 204


@dataclass(frozen=True)
class Expect:
    """One entry the call must leave: its resource, action and actor, and some fields of its diff: a value is the
    field's (old, new), ``SECRET`` says it is marked secret, ``ANY`` only that it changed."""

    resource_type: str
    action: str
    actor: str
    diff: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    build_reason: str | None = None


SECRET, ANY = "<secret>", "<any>"
# Stands for dave's id, known only once the personas exist.
DAVE = "<dave>"


@dataclass(frozen=True)
class Case:
    endpoint: str
    run: Callable[[World], TestResponse | None]
    expect: tuple[Expect, ...]


def _ok(response: TestResponse, *statuses: int) -> TestResponse:
    assert response.status_code in (statuses or (200, 201, 204)), (response.status_code, response.get_data(True))
    return response


def _keep(world: World, name: str, value: str) -> None:
    world.ids[name] = value


def _push(world: World, name: str, template: str | None = None, organization: str = "") -> TestResponse:
    """A version pushed (for ``template``, or for none yet; by Coder's path to ``organization`` when given) and
    imported by the stand-in daemon."""
    bob = world.people["bob"]
    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
    upload = _ok(
        world.api.post("/api/v2/files", data=archive, headers={**bob.auth, "Content-Type": "application/x-tar"})
    )
    body = {"file_id": upload.json["id"], **({"template_id": world.ids[template]} if template else {})}
    path = f"/organizations/{organization}/templateversions" if organization else "/templateversions"
    version = _ok(world.call("POST", path, "bob", body)).json
    _keep(world, name, version["id"])
    world.complete_import(version)
    return world.call("GET", f"/templateversions/{version['id']}", "bob")


def _create_template(world: World) -> TestResponse:
    reply = _ok(world.call("POST", "/templates", "bob", {"name": "dev", "version_id": world.ids["v1"]}))
    _keep(world, "template", reply.json["id"])
    return reply


def _create_workspace(world: World) -> TestResponse:
    body = {"template_id": world.ids["template"], "name": "w1", "rich_parameter_values": []}
    reply = _ok(world.call("POST", "/workspaces", "carol", body))
    _keep(world, "workspace", reply.json["id"])
    world.complete_build(reply.json["latest_build"])
    return reply


def _create_token(world: World) -> TestResponse:
    reply = _ok(world.call("POST", "/users/me/tokens", "carol", {"name": "ci"}))
    _keep(world, "token", reply.json["id"])
    return reply


def _create_user(world: World) -> TestResponse:
    body = {"username": "erin", "email": "erin@example.com", "password": PASSWORD}
    reply = _ok(world.call("POST", "/users", "alice", body))
    _keep(world, "erin", reply.json["id"])
    return reply


def _login_erin(world: World) -> TestResponse:
    reply = _ok(world.call("POST", "/users/login", None, {"email": "erin@example.com", "password": PASSWORD}))
    _keep(world, "erin_token", reply.json["session_token"])
    return reply


def _create_group(world: World) -> TestResponse:
    reply = _ok(world.call("POST", "/organizations/default/groups", "alice", {"name": "ml"}))
    _keep(world, "group", reply.json["id"])
    return reply


def _stop(world: World) -> TestResponse:
    reply = _ok(world.call("POST", f"/workspaces/{world.ids['workspace']}/builds", "carol", {"transition": "stop"}))
    _keep(world, "stop_build", reply.json["id"])
    return reply


def _start_again(world: World) -> TestResponse:
    world.complete_build(world.call("GET", f"/workspacebuilds/{world.ids['stop_build']}", "carol").json)
    body = {"transition": "start"}
    reply = _ok(world.call("POST", f"/workspaces/{world.ids['workspace']}/builds", "carol", body))
    _keep(world, "start_build", reply.json["id"])
    return reply


def _link_git_provider(world: World) -> None:
    """A Git link as the OAuth flow leaves one (the provider is outside the test): then unlinked through the API."""
    from app.externalauth.models import ExternalAuthLink

    with world.app.app_context():
        db.session.add(ExternalAuthLink(user_id=world.people["carol"].id, provider_id="github",
                                        access_token=SECRET_VALUE, refresh_token=SECRET_VALUE_2))  # fmt: skip
        db.session.commit()


def _delete_spare_template(world: World) -> TestResponse:
    _push(world, "v9")
    spare = _ok(world.call("POST", "/templates", "bob", {"name": "spare", "version_id": world.ids["v9"]})).json
    return world.call("DELETE", f"/templates/{spare['id']}", "bob")


def _deadline(world: World) -> str:
    return (datetime.now(UTC) + timedelta(hours=3)).isoformat().replace("+00:00", "Z")


CASES: tuple[Case, ...] = (
    Case(
        "provisionerd_api.register",
        lambda w: setattr(w, "daemon", FakeDaemon(w.api)) or None,
        (Expect("provisioner_daemon", "register", "provisioner-psk", {"auth": (None, "psk")}),),
    ),
    Case(
        "users_api.create_user",
        _create_user,
        (Expect("user", "create", "alice", {"username": (None, "erin"), "password_hash": SECRET}),),
    ),
    Case(
        "users_api.update_user",
        lambda w: w.call("PATCH", f"/users/{w.ids['erin']}", "alice", {"roles": ["auditor"]}),
        (Expect("user", "write", "alice", {"roles": ([], ["auditor"])}),),
    ),
    Case(
        "users_api.login",
        _login_erin,
        (
            Expect("user", "login", "erin", {"login_type": (None, "password")}),
            Expect("api_key", "create", "erin", {"secret_hash": SECRET}),
        ),
    ),
    Case(
        "users_api.login#refused",
        lambda w: _ok(
            w.call("POST", "/users/login", None, {"email": "erin@example.com", "password": "wrong-pass"}), 401
        ),
        (Expect("user", "login", "", {"reason": ANY}, status=401),),
    ),
    Case(
        "users_api.logout",
        lambda w: w.api.post("/api/v2/users/logout", headers={"Authorization": f"Bearer {w.ids['erin_token']}"}),
        (Expect("user", "logout", "erin"), Expect("api_key", "delete", "erin")),
    ),
    Case(
        "users_api.change_password",
        lambda w: w.call("PUT", f"/users/{w.ids['erin']}/password", "alice", {"password": "temporary-password"}),
        (Expect("user", "write", "alice", {"password_hash": SECRET, "must_change_password": SECRET}),),
    ),
    Case(
        "users_api.create_invitation",
        lambda w: _keep(
            w, "invitation", _ok(w.call("POST", "/users/invitations", "alice", {"email": "i@example.com"})).json["id"]
        ),
        (Expect("user_invitation", "create", "alice", {"email": (None, "i@example.com"), "secret_hash": SECRET}),),
    ),
    Case(
        "users_api.revoke_invitation",
        lambda w: w.call("DELETE", f"/users/invitations/{w.ids['invitation']}", "alice"),
        (Expect("user_invitation", "delete", "alice", {"email": ("i@example.com", None)}),),
    ),
    Case(
        "users_api.create_token",
        _create_token,
        (Expect("api_key", "create", "carol", {"name": (None, "ci"), "secret_hash": SECRET}),),
    ),
    Case(
        "users_api.delete_token",
        lambda w: w.call("DELETE", f"/users/me/tokens/{w.ids['token']}", "carol"),
        (Expect("api_key", "delete", "carol", {"name": ("ci", None)}),),
    ),
    Case(
        "usersecrets_api.create_secret",
        lambda w: w.call("POST", "/users/me/secrets", "carol", {"name": "aws", "value": SECRET_VALUE}),
        (Expect("user_secret", "create", "carol", {"name": (None, "aws"), "value": SECRET}),),
    ),
    Case(
        "usersecrets_api.update_secret",
        lambda w: w.call("PATCH", "/users/me/secrets/aws", "carol", {"value": SECRET_VALUE_2}),
        (Expect("user_secret", "write", "carol", {"value": SECRET}),),
    ),
    Case(
        "usersecrets_api.delete_secret",
        lambda w: w.call("DELETE", "/users/me/secrets/aws", "carol"),
        (Expect("user_secret", "delete", "carol", {"name": ("aws", None), "value": SECRET}),),
    ),
    Case(
        "catalog_api.create_version",
        lambda w: _push(w, "v1"),
        (Expect("template_version", "create", "bob", {"job_id": ANY}),),
    ),
    Case(
        "catalog_api.create_organization_version",
        lambda w: _push(w, "v1-default", organization="default"),
        (Expect("template_version", "create", "bob", {"job_id": ANY}),),
    ),
    Case(
        "catalog_api.create_template",
        _create_template,
        (
            Expect("template", "create", "bob", {"name": (None, "dev")}),
            Expect("template", "write", "bob", {"active_version_id": ANY}),
        ),
    ),
    Case(
        "catalog_api.create_organization_template",
        lambda w: (
            _push(w, "v1-org", organization="default")
            and _ok(
                w.call(
                    "POST",
                    "/organizations/default/templates",
                    "bob",
                    {"name": "org-dev", "version_id": w.ids["v1-org"]},
                )
            )
        ),
        (
            Expect("template_version", "create", "bob", {"job_id": ANY}),
            Expect("template", "create", "bob", {"name": (None, "org-dev")}),
            Expect("template", "write", "bob", {"active_version_id": ANY}),
        ),
    ),
    Case(
        "lifecycle_api.update_template",
        lambda w: w.call(
            "PATCH",
            f"/templates/{w.ids['template']}",
            "bob",
            {"default_ttl_ms": 3_600_000, "max_port_share_level": "authenticated"},
        ),
        (
            Expect(
                "template",
                "write",
                "bob",
                {"default_ttl_ms": (0, 3_600_000), "max_port_share_level": ("owner", "authenticated")},
            ),
        ),
    ),
    Case(
        "template_acl_api.update_acl",
        lambda w: w.call(
            "PATCH", f"/templates/{w.ids['template']}/acl", "bob", {"user_perms": {w.people["dave"].id: "use"}}
        ),
        (Expect("template_acl", "create", "bob", {"role": (None, "use")}),),
    ),
    Case(
        "catalog_api.promote_version",
        lambda w: (
            _push(w, "v2", "template"),
            w.call("PATCH", f"/templates/{w.ids['template']}/versions", "bob", {"id": w.ids["v2"]}),
        )[1],
        (Expect("template", "write", "bob", {"active_version_id": ANY}),),
    ),
    Case(
        "catalog_api.archive_version",
        lambda w: w.call("POST", f"/templateversions/{w.ids['v1']}/archive", "bob"),
        (Expect("template_version", "write", "bob", {"archived_at": ANY}),),
    ),
    Case(
        "catalog_api.unarchive_version",
        lambda w: w.call("POST", f"/templateversions/{w.ids['v1']}/unarchive", "bob"),
        (Expect("template_version", "write", "bob", {"archived_at": ANY}),),
    ),
    Case(
        "catalog_api.archive_versions",
        lambda w: w.call("POST", f"/templates/{w.ids['template']}/versions/archive", "bob", {"all": True}),
        (Expect("template_version", "write", "bob", {"archived_at": ANY}),),
    ),
    Case(
        "workspaces_api.create_workspace",
        _create_workspace,
        (
            Expect("workspace", "create", "carol", {"name": (None, "w1")}),
            Expect("workspace_build", "start", "carol", {"transition": (None, "start")}, build_reason="initiator"),
        ),
    ),
    Case(
        "lifecycle_api.set_autostart",
        lambda w: w.call(
            "PUT", f"/workspaces/{w.ids['workspace']}/autostart", "carol", {"schedule": "CRON_TZ=UTC 0 6 * * 1-5"}
        ),
        (Expect("workspace", "write", "carol", {"autostart_schedule": (None, "CRON_TZ=UTC 0 6 * * 1-5")}),),
    ),
    Case(
        "lifecycle_api.set_ttl",
        lambda w: w.call("PUT", f"/workspaces/{w.ids['workspace']}/ttl", "carol", {"ttl_ms": 7_200_000}),
        (Expect("workspace", "write", "carol", {"ttl_ms": ANY}),),
    ),
    Case(
        "lifecycle_api.set_automatic_updates",
        lambda w: w.call(
            "PUT", f"/workspaces/{w.ids['workspace']}/autoupdates", "carol", {"automatic_updates": "always"}
        ),
        (Expect("workspace", "write", "carol", {"automatic_updates": ("never", "always")}),),
    ),
    Case(
        "lifecycle_api.extend",
        lambda w: w.call("PUT", f"/workspaces/{w.ids['workspace']}/extend", "carol", {"deadline": _deadline(w)}),
        (Expect("workspace_build", "write", "carol", {"deadline": ANY}),),
    ),
    Case(
        "workspace_sharing_api.update_acl",
        lambda w: w.call(
            "PATCH", f"/workspaces/{w.ids['workspace']}/acl", "carol", {"user_roles": {w.people["dave"].id: "use"}}
        ),
        (Expect("workspace_acl", "create", "carol", {"role": (None, "use")}),),
    ),
    Case(
        "agents_api.share_port",
        lambda w: w.call(
            "POST",
            f"/workspaces/{w.ids['workspace']}/port-share",
            "carol",
            {"agent_name": "main", "port": 8080, "share_level": "authenticated", "protocol": "http"},
        ),
        (Expect("port_share", "create", "carol", {"port": (None, 8080)}),),
    ),
    Case(
        "agents_api.unshare_port",
        lambda w: w.call(
            "DELETE", f"/workspaces/{w.ids['workspace']}/port-share", "carol", {"agent_name": "main", "port": 8080}
        ),
        (Expect("port_share", "delete", "carol", {"port": (8080, None)}),),
    ),
    Case(
        "workspaces_api.create_build",
        _stop,
        (Expect("workspace_build", "stop", "carol", {"transition": (None, "stop")}, build_reason="initiator"),),
    ),
    Case(
        "workspaces_api.cancel_build",
        lambda w: (_start_again(w), w.call("PATCH", f"/workspacebuilds/{w.ids['start_build']}/cancel", "carol"))[1],
        (Expect("provisioner_job", "write", "carol", {"canceled_at": ANY}),),
    ),
    Case(
        "lifecycle_api.set_dormant",
        lambda w: w.call("PUT", f"/workspaces/{w.ids['workspace']}/dormant", "alice", {"dormant": True}),
        (Expect("workspace", "write", "alice", {"dormant_at": ANY}),),
    ),
    Case("groups_api.create_group", _create_group, (Expect("group", "create", "alice", {"name": (None, "ml")}),)),
    Case(
        "groups_api.update_group",
        lambda w: w.call(
            "PATCH", f"/groups/{w.ids['group']}", "alice", {"add_users": [w.people["dave"].id], "display_name": "ML"}
        ),
        (
            Expect("group_member", "create", "alice", {"user_id": (None, DAVE)}),
            Expect("group", "write", "alice", {"display_name": ("", "ML")}),
        ),
    ),
    Case(
        "groups_api.delete_group",
        lambda w: w.call("DELETE", f"/groups/{w.ids['group']}", "alice"),
        (Expect("group", "delete", "alice", {"name": ("ml", None)}),),
    ),
    Case(
        "organizations_api.create_organization",
        lambda w: w.call("POST", "/organizations", "alice", {"name": "acme"}),
        (
            Expect("organization", "create", "alice", {"name": (None, "acme")}),
            Expect("organization_member", "create", "alice", {"roles": (None, ["organization-admin"])}),
        ),
    ),
    Case(
        "organizations_api.update_organization",
        lambda w: w.call("PATCH", "/organizations/acme", "alice", {"display_name": "Acme Inc"}),
        (Expect("organization", "write", "alice", {"display_name": ("acme", "Acme Inc")}),),
    ),
    Case(
        "organizations_api.add_member",
        lambda w: w.call("POST", "/organizations/acme/members/dave", "alice"),
        (Expect("organization_member", "create", "alice", {"user_id": (None, DAVE)}),),
    ),
    Case(
        "organizations_api.update_member_roles",
        lambda w: w.call("PUT", "/organizations/acme/members/dave/roles", "alice", {"roles": ["organization-auditor"]}),
        (Expect("organization_member", "write", "alice", {"roles": ([], ["organization-auditor"])}),),
    ),
    Case(
        "organizations_api.remove_member",
        lambda w: w.call("DELETE", "/organizations/acme/members/dave", "alice"),
        (Expect("organization_member", "delete", "alice", {"roles": (["organization-auditor"], None)}),),
    ),
    Case(
        "organizations_api.delete_organization",
        lambda w: w.call("DELETE", "/organizations/acme", "alice"),
        (Expect("organization", "delete", "alice", {"name": ("acme", None)}),),
    ),
    Case(
        "provisioners_api.create_key",
        lambda w: w.call("POST", "/provisionerkeys", "alice", {"name": "gpu", "tags": {"gpu": "a100"}}),
        (Expect("provisioner_key", "create", "alice", {"name": (None, "gpu"), "hashed_secret": SECRET}),),
    ),
    Case(
        "provisioners_api.delete_key",
        lambda w: w.call("DELETE", "/provisionerkeys/gpu", "alice"),
        (Expect("provisioner_key", "delete", "alice", {"name": ("gpu", None)}),),
    ),
    Case(
        "notifications_api.set_preferences",
        lambda w: w.call("PUT", "/users/me/notifications/preferences", "carol", {"workspace_autostopped": False}),
        (Expect("notification_preference", "create", "carol", {"enabled": (None, False)}),),
    ),
    Case(
        "appearance_api.update_appearance",
        lambda w: w.call("PUT", "/appearance", "alice", {"application_name": "Acme"}),
        (Expect("appearance", "create", "alice", {"application_name": (None, "Acme")}),),
    ),
    Case(
        "prebuilds_api.update_settings",
        lambda w: w.call("PUT", "/prebuilds/settings", "alice", {"reconciliation_paused": True}),
        (Expect("prebuilds_settings", "create", "alice", {"reconciliation_paused": (None, True)}),),
    ),
    Case(
        "lifecycle_api.set_quiet_hours",
        lambda w: w.call("PUT", "/users/me/quiet-hours", "carol", {"schedule": "CRON_TZ=UTC 0 2 * * *"}),
        (Expect("user", "write", "carol", {"quiet_hours_schedule": (None, "CRON_TZ=UTC 0 2 * * *")}),),
    ),
    Case(
        "externalauth_api.regenerate_git_ssh_key",
        lambda w: w.call("PUT", "/users/me/gitsshkey", "carol"),
        (Expect("git_ssh_key", "create", "carol", {"private_key": SECRET, "public_key": ANY}),),
    ),
    Case(
        "externalauth_api.unlink",
        lambda w: (_link_git_provider(w), w.call("DELETE", "/external-auth/github", "carol"))[1],
        (Expect("external_auth_link", "delete", "carol", {"access_token": SECRET, "refresh_token": SECRET}),),
    ),
    Case(
        "idpsync_api.update_group_sync",
        lambda w: w.call(
            "PATCH", "/organizations/default/settings/idpsync/groups", "alice", {"field": "groups", "mapping": {}}
        ),
        (Expect("organization", "write", "alice", {"group_sync": ANY}),),
    ),
    Case(
        "idpsync_api.update_role_sync",
        lambda w: w.call(
            "PATCH",
            "/organizations/default/settings/idpsync/roles",
            "alice",
            {"field": "roles", "mapping": {"admins": ["owner"]}},
        ),
        (Expect("organization", "write", "alice", {"role_sync": ANY}),),
    ),
    Case(
        "debug_api.set_health_settings",
        lambda w: w.call("PUT", "/debug/health/settings", "alice", {"dismissed_healthchecks": ["websocket"]}),
        (Expect("health_settings", "write", "alice", {"dismissed_healthchecks": ([], ["websocket"])}),),
    ),
    Case(
        "catalog_api.cancel_version",
        lambda w: (
            _keep(w, "v3", push_version(w.api, w.people["bob"])["id"]),
            w.call("PATCH", f"/templateversions/{w.ids['v3']}/cancel", "bob"),
        )[1],
        (Expect("provisioner_job", "write", "bob", {"canceled_at": ANY}),),
    ),
    Case(
        "provisioners_api.cancel",
        lambda w: w.call(
            "PATCH", f"/provisionerjobs/{push_version(w.api, w.people['bob'])['job']['id']}/cancel", "bob"
        ),
        (Expect("provisioner_job", "write", "bob", {"canceled_at": ANY}),),
    ),
    Case(
        "workspaces_api.create_build#delete",
        lambda w: w.call(
            "POST", f"/workspaces/{w.ids['workspace']}/builds", "alice", {"transition": "delete", "orphan": True}
        ),
        (Expect("workspace_build", "delete", "alice", {"transition": (None, "delete")}, build_reason="initiator"),),
    ),
    Case(
        "catalog_api.delete_template",
        lambda w: _delete_spare_template(w),
        (Expect("template", "write", "bob", {"deleted_at": ANY}),),
    ),
)

# API writes no table case calls, each for a stated reason.
NOT_IN_TABLE = {
    "users_api.create_first_user": "needs an empty deployment: test_the_first_user_is_audited",
    "catalog_api.upload_file": "stores an archive's bytes; the version pushed with it is audited",
    "workspaces_api.confirm_build": "needs a plan to confirm: recorded as a cancel is (jobs.py confirm_job)",
    "permissions_api.authcheck": "asks what one may do; changes nothing",
    "notifications_api.mark_read": "marks a message in one's own inbox; no change to the deployment",
    "notifications_api.mark_all_read": "marks messages in one's own inbox; no change to the deployment",
    "notifications_api.retry_delivery": "resends a message; no change to the deployment",
    **{f"provisionerd_api.{name}": "a daemon reporting on a job it runs (the build or version is audited)"
       for name in ("acquire", "complete", "fail", "heartbeat", "logs", "quota", "wait")},
    **{f"agent_api.{name}": "an agent reporting on its workspace" for name in
       ("app_health", "lifecycle", "listening_ports", "logs", "metadata", "script_timings", "startup")},
}  # fmt: skip


def _api_writes() -> set[str]:
    settings = make_settings(Path(tempfile.gettempdir()), "sqlite://", "unix:///nonexistent")
    writes = set()
    for rule in create_app(settings).url_map.iter_rules():
        if rule.rule.startswith("/api/") and (rule.methods or set()) - {"GET", "HEAD", "OPTIONS"}:
            writes.add(rule.endpoint)
    return writes


def test_every_api_write_is_in_the_table_or_says_why_not() -> None:
    tabled = {case.endpoint.partition("#")[0] for case in CASES}
    assert _api_writes() - tabled - set(NOT_IN_TABLE) == set()
    assert (tabled | set(NOT_IN_TABLE)) - _api_writes() == set()


def test_every_model_is_audited_or_exempt_on_purpose() -> None:
    _api_writes()  # builds an app: every model imported, the audited ones registered
    models = {mapper.class_ for mapper in Base.registry.mappers}
    decided = set(registry()) | set(exemptions())
    assert sorted(model.__name__ for model in models - decided) == []


def _new_entries(app: Flask, after: int) -> list[AuditLog]:
    with app.app_context():
        entries = list(db.session.scalars(select(AuditLog).where(AuditLog.id > after).order_by(AuditLog.id)))
        db.session.expunge_all()
        return entries


def _matches(entry: AuditLog, expect: Expect, people: dict[str, Persona]) -> bool:
    if (entry.resource_type, entry.action, entry.username, entry.status_code) != (
        expect.resource_type, expect.action, expect.actor, expect.status,
    ):  # fmt: skip
        return False
    if expect.build_reason is not None and entry.build_reason != expect.build_reason:
        return False
    diff = json.loads(entry.diff)
    for name, wanted in expect.diff.items():
        got = diff.get(name)
        if got is None:
            return False
        if wanted == SECRET:
            if not (got["secret"] and got["old"] is None and got["new"] is None):
                return False
        elif wanted == ANY:
            if got["secret"] or got["old"] == got["new"]:
                return False
        elif wanted[1] == DAVE:
            if got["new"] != people["dave"].id:
                return False
        elif (got["old"], got["new"]) != tuple(wanted):
            return False
    return True


def test_every_audited_action_leaves_its_entry_with_actor_and_diff(app: Flask, personas: dict[str, Persona]) -> None:
    world = World(app, app.test_client(), personas)
    last = _new_entries(app, 0)[-1].id
    missing = []
    for case in CASES:
        response = case.run(world)
        if response is not None:
            assert response.status_code < 300 or case.endpoint.endswith("#refused"), (case.endpoint, response.json)
        entries = _new_entries(app, last)
        for expect in case.expect:
            if not any(_matches(entry, expect, personas) for entry in entries):
                found = [(e.resource_type, e.action, e.username, e.status_code, e.diff[:200]) for e in entries]
                missing.append(f"{case.endpoint}: no {expect} among {found}")
        last = entries[-1].id if entries else last
    assert missing == [], "\n".join(missing)
    with app.app_context():
        rows = db.session.execute(select(AuditLog.diff, AuditLog.resource_name, AuditLog.resource_id)).all()
    everything = json.dumps([tuple(row) for row in rows])
    assert SECRET_VALUE not in everything and SECRET_VALUE_2 not in everything
    # Nor in either export, nor on the page.
    alice = personas["alice"].auth
    for fmt in ("csv", "ndjson"):
        exported = world.api.get(f"/api/v2/audit/export?format={fmt}", headers=alice)
        assert exported.status_code == 200
        body = exported.get_data(as_text=True)
        assert "user_secret" in body and SECRET_VALUE not in body and SECRET_VALUE_2 not in body
    browser = app.test_client()
    sign_in(browser, "alice@example.com", PASSWORD)
    page = browser.get("/audit?q=resource_type:user_secret")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "secret (changed; value not recorded)" in text and SECRET_VALUE not in text
    verified = world.api.get("/api/v2/audit/verify", headers=alice).json
    assert verified["ok"] is True and verified["checked"] > len(CASES), verified


def test_sign_in_and_out_in_the_browser_are_audited(app: Flask, personas: dict[str, Persona]) -> None:
    browser = app.test_client()
    refused = post_form(browser, "/login", {"email": "carol@example.com", "password": "not-her-password"})
    assert refused.status_code == 401
    sign_in(browser, "carol@example.com", PASSWORD)
    token = csrf_token(browser, "/workspaces")
    assert browser.post("/logout", data={"csrf_token": token}).status_code == 302
    entries = [
        (e.action, e.username, e.status_code, e.resource_name)
        for e in _new_entries(app, 0)
        if e.action in ("login", "logout")
    ]
    assert entries == [
        ("login", "", 401, "carol@example.com"),
        ("login", "carol", 200, "carol"),
        ("logout", "carol", 200, "carol"),
    ]  # fmt: skip
    assert all(e.user_agent and e.ip for e in _new_entries(app, 0) if e.action in ("login", "logout"))


def test_the_first_user_is_audited(app: Flask) -> None:
    body = {"username": "alice", "email": "alice@example.com", "password": PASSWORD}
    assert app.test_client().post("/api/v2/users/first", json=body).status_code == 201
    (entry,) = [e for e in _new_entries(app, 0) if e.resource_type == "user"]
    assert (entry.action, entry.resource_name, entry.actor_kind) == ("create", "alice", "anonymous")


def test_the_filter_pages_newest_first_and_refuses_junk(app: Flask, personas: dict[str, Persona]) -> None:
    api, alice = app.test_client(), personas["alice"].auth
    for number in range(5):
        assert (
            api.post("/api/v2/users/me/tokens", json={"name": f"t{number}"}, headers=personas["carol"].auth).status_code
            == 201
        )
    first = api.get("/api/v2/audit?q=resource_type:api_key action:create username:carol&limit=2", headers=alice).json
    assert [e["resource_target"] for e in first["audit_logs"]] == ["t4", "t3"]
    second = api.get(
        f"/api/v2/audit?q=resource_type:api_key username:carol&limit=2&before={first['next_before']}", headers=alice
    ).json
    assert [e["resource_target"] for e in second["audit_logs"]] == ["t2", "t1"]
    today = datetime.now(UTC).date()
    dated = f"date_from:{today.isoformat()} date_to:{today.isoformat()} username:carol"
    assert len(api.get(f"/api/v2/audit?q={dated}&limit=100", headers=alice).json["audit_logs"]) >= 5
    past = (today - timedelta(days=3)).isoformat()
    assert api.get(f"/api/v2/audit?q=date_to:{past}", headers=alice).json["audit_logs"] == []
    one = first["audit_logs"][0]
    by_id = api.get(f"/api/v2/audit?q=resource_id:{one['resource_id']}", headers=alice).json["audit_logs"]
    assert [e["id"] for e in by_id] == [one["id"]]
    for junk in ("colour:red", "date_from:yesterday", "username:a;b", "limit"):
        reply = api.get(f"/api/v2/audit?q={junk}", headers=alice)
        assert reply.status_code == 400 and reply.is_json, junk
    assert api.get("/api/v2/audit?before=x", headers=alice).status_code == 400
    assert api.get("/api/v2/audit/export?format=xml", headers=alice).status_code == 400
    csv_lines = (
        api.get("/api/v2/audit/export?format=csv&q=resource_type:api_key username:carol", headers=alice)
        .get_data(as_text=True)
        .splitlines()
    )
    assert csv_lines[0].startswith("id,time,actor_kind,username") and len(csv_lines) == 6
    ndjson = api.get("/api/v2/audit/export?q=username:carol resource_type:api_key", headers=alice).get_data(
        as_text=True
    )
    assert [json.loads(line)["resource_target"] for line in ndjson.splitlines()] == ["t4", "t3", "t2", "t1", "t0"]
    for persona in ("bob", "carol"):
        assert api.get("/api/v2/audit", headers=personas[persona].auth).status_code == 403


def test_an_owner_makes_an_auditor_on_the_users_page_who_reads_the_log_and_changes_nothing(
    app: Flask, personas: dict[str, Persona]
) -> None:
    owner = app.test_client()
    sign_in(owner, "alice@example.com", PASSWORD)
    carol = personas["carol"]
    form = {"role": "auditor", "confirmed": "yes"}
    changed = post_form(owner, f"/users/{carol.id}", form, token_from="/users")
    assert changed.status_code == 302
    assert "carol is now an auditor" in owner.get("/users").get_data(as_text=True)
    auditor = app.test_client()
    sign_in(auditor, "carol@example.com", PASSWORD)
    page = auditor.get("/audit?q=resource_type:user action:write")
    assert page.status_code == 200 and "auditor" in page.get_data(as_text=True)
    assert auditor.get("/users").status_code == 200
    refused = post_form(auditor, "/account/gitsshkey", {}, token_from="/account")
    assert refused.status_code == 403
    api = app.test_client()
    assert api.get("/api/v2/audit", headers=carol.auth).status_code == 200
    assert api.post("/api/v2/users/me/tokens", json={"name": "x"}, headers=carol.auth).status_code == 403
