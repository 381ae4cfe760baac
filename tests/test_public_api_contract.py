"""The server's real answers decode into the public API types the CLI reads (protocol/publicapi.py), so a change on
either side that breaks `slipway` fails here, in seconds, rather than in an end-to-end CLI test (or in the field)."""

from __future__ import annotations

import base64

import pytest
from flask.testing import FlaskClient

from protocol.codec import decode_list
from protocol.logs import JobLog
from protocol.publicapi import (
    AclAvailable,
    AgentLog,
    ApiToken,
    AuthMethods,
    BuildParameter,
    ErrorBody,
    Group,
    Job,
    NewApiToken,
    NewProvisionerKey,
    ProvisionerDaemon,
    ProvisionerKey,
    SessionToken,
    Template,
    TemplateAcl,
    TemplateVersion,
    User,
    Workspace,
    WorkspaceBuild,
    WorkspaceResource,
)
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template

pytestmark = pytest.mark.databases("sqlite")

AGENT_TOKEN = "5f0c8d0e-6d51-4f2a-8d3e-0c9d5c8a2b7e"
AGENT = {
    "name": "main",
    "os": "linux",
    "arch": "amd64",
    "token": AGENT_TOKEN,
    "scripts": [{"display_name": "Tools", "script": "echo tools", "run_on_start": True}],
}


def test_every_answer_the_cli_reads_decodes_into_its_public_api_type(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob, carol = personas["alice"], personas["bob"], personas["carol"]
    daemon = FakeDaemon(client)
    template = Template.from_json(import_template(client, personas, daemon))
    assert template.name == "dev" and template.active_version_id

    # Accounts (`slipway login`, `whoami`, `users`, `tokens`).
    login = client.post("/api/v2/users/login", json={"email": "carol@example.com", "password": PASSWORD})
    assert SessionToken.from_json(login.json).session_token
    assert AuthMethods.from_json(client.get("/api/v2/users/authmethods").json).password.enabled
    assert ErrorBody.from_json(client.get("/api/v2/users/first").json).message
    me = User.from_json(client.get("/api/v2/users/me", headers=carol.auth).json)
    assert me.username == "carol" and "member" in me.roles
    assert {user.username for user in decode_list(User, client.get("/api/v2/users", headers=alice.auth).json)} >= {
        "alice",
        "bob",
        "carol",
    }
    created = client.post("/api/v2/users/me/tokens", json={"name": "ci"}, headers=carol.auth)
    assert NewApiToken.from_json(created.json).token
    assert [
        token.name for token in decode_list(ApiToken, client.get("/api/v2/users/me/tokens", headers=carol.auth).json)
    ] == ["ci"]
    refused = client.post("/api/v2/users/me/tokens", json={"name": ""}, headers=carol.auth)
    assert refused.status_code == 400 and ErrorBody.from_json(refused.json).validations

    # Templates (`slipway templates push|list|versions list`).
    listed = decode_list(Template, client.get("/api/v2/templates?name=dev", headers=bob.auth).json)
    assert [item.id for item in listed] == [template.id]
    versions = decode_list(
        TemplateVersion, client.get(f"/api/v2/templates/{template.id}/versions", headers=bob.auth).json
    )
    assert [version.job.status for version in versions] == ["succeeded"]

    # Workspaces (`slipway create|list|show|logs|ssh`).
    answer = client.post(
        "/api/v2/workspaces",
        json={"template_id": template.id, "name": "w1", "rich_parameter_values": [{"name": "region", "value": "eu"}]},
        headers=carol.auth,
    )
    workspace = Workspace.from_json(answer.json)
    build = workspace.latest_build
    assert build.build_number == 1 and build.transition == "start" and build.job.status == "pending"
    assert build.job.queue_position == 1
    assert daemon.call(f"/jobs/{build.job.id}/acquire").status_code == 200
    assert (
        daemon.call(f"/jobs/{build.job.id}/logs", {"logs": [{"stage": "Planning", "output": "plan"}]}).status_code
        == 200
    )
    state = base64.b64encode(b"{}").decode()
    resources = [{"name": "dev", "type": "terraform_data", "agents": [AGENT]}]
    done = daemon.call(f"/jobs/{build.job.id}/complete", {"workspace_build": {"state": state, "resources": resources}})
    assert done.status_code == 204, done.json

    mine = decode_list(Workspace, client.get("/api/v2/workspaces?owner=me&name=w1", headers=carol.auth).json)
    assert [(item.name, item.status, item.owner_name, item.template_name) for item in mine] == [
        ("w1", "running", "carol", "dev")
    ]
    current = mine[0].latest_build
    assert current.resources is not None and [agent.name for agent in current.resources[0].agents] == ["main"]
    agent = current.resources[0].agents[0]
    assert agent.status == "connecting" and agent.lifecycle_state == "created" and agent.log_sources
    again = WorkspaceBuild.from_json(client.get(f"/api/v2/workspacebuilds/{current.id}", headers=carol.auth).json)
    assert again.job.status == "succeeded"
    assert [
        item.build_number
        for item in decode_list(
            WorkspaceBuild, client.get(f"/api/v2/workspaces/{workspace.id}/builds", headers=carol.auth).json
        )
    ] == [1]
    parameters = decode_list(
        BuildParameter, client.get(f"/api/v2/workspacebuilds/{current.id}/parameters", headers=carol.auth).json
    )
    assert ("region", "eu") in [(item.name, item.value) for item in parameters]
    listed_resources = decode_list(
        WorkspaceResource, client.get(f"/api/v2/workspacebuilds/{current.id}/resources", headers=carol.auth).json
    )
    assert [(item.type, item.name) for item in listed_resources] == [("terraform_data", "dev")]
    lines = decode_list(JobLog, client.get(f"/api/v2/workspacebuilds/{current.id}/logs", headers=carol.auth).json)
    assert "plan" in [line.output for line in lines]
    source = agent.log_sources[0].id
    sent = client.post(
        "/api/v2/workspaceagents/me/logs",
        json={"logs": [{"output": "hello from tools", "log_source_id": source}]},
        headers={"Slipway-Agent-Token": AGENT_TOKEN},
    )
    assert sent.status_code == 200, sent.json
    agent_logs = decode_list(AgentLog, client.get(f"/api/v2/workspaceagents/{agent.id}/logs", headers=carol.auth).json)
    assert [(line.source_id, line.output) for line in agent_logs] == [(source, "hello from tools")]

    # Provisioners (`slipway provisioner list|jobs list|jobs cancel|keys`).
    daemons = decode_list(ProvisionerDaemon, client.get("/api/v2/provisionerdaemons", headers=bob.auth).json)
    assert [item.name for item in daemons] == ["d1"]
    jobs = decode_list(Job, client.get("/api/v2/provisionerjobs?limit=10", headers=bob.auth).json)
    assert {job.id for job in jobs} >= {build.job.id} and all(job.metadata.title for job in jobs)
    key = NewProvisionerKey.from_json(
        client.post("/api/v2/provisionerkeys", json={"name": "gpu", "tags": {"gpu": "a100"}}, headers=bob.auth).json
    )
    assert key.key and key.tags["gpu"] == "a100"
    keys = decode_list(ProvisionerKey, client.get("/api/v2/provisionerkeys", headers=bob.auth).json)
    assert [(item.name, item.tags["gpu"]) for item in keys] == [("gpu", "a100")]
    stop = client.post(f"/api/v2/workspaces/{workspace.id}/builds", json={"transition": "stop"}, headers=carol.auth)
    stopping = WorkspaceBuild.from_json(stop.json)
    canceled = client.patch(f"/api/v2/provisionerjobs/{stopping.job.id}/cancel", headers=carol.auth)
    assert Job.from_json(canceled.json).status in ("canceled", "canceling")


def test_groups_and_access_lists_decode_into_their_public_api_types(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """`slipway groups` and `slipway templates permissions` read these."""
    alice = personas["alice"]
    template = Template.from_json(import_template(client, personas, FakeDaemon(client)))
    created = Group.from_json(client.post("/api/v2/organizations/default/groups", json={"name": "ml"},
                                          headers=alice.auth).json)  # fmt: skip
    patched = client.patch(
        f"/api/v2/groups/{created.id}", json={"add_users": [personas["carol"].id]}, headers=alice.auth
    )
    group = Group.from_json(patched.json)
    assert group.total_member_count == 1 and [member.username for member in group.members] == ["carol"]
    listed = decode_list(Group, client.get("/api/v2/organizations/default/groups", headers=alice.auth).json)
    assert [item.name for item in listed] == ["Everyone", "ml"]
    acl_url = f"/api/v2/templates/{template.id}/acl"
    client.patch(acl_url, json={"group_perms": {group.id: "use"}, "user_perms": {personas["dave"].id: "admin"}},
                 headers=alice.auth)  # fmt: skip
    acl = TemplateAcl.from_json(client.get(acl_url, headers=alice.auth).json)
    assert [(entry.name, entry.role) for entry in acl.group] == [("Everyone", "use"), ("ml", "use")]
    assert [(entry.username, entry.role) for entry in acl.users] == [("dave", "admin")]
    available = AclAvailable.from_json(client.get(f"{acl_url}/available?q=car", headers=alice.auth).json)
    assert [user.username for user in available.users] == ["carol"]
