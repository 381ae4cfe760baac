"""A stand-in provisioner daemon that speaks the protocol over Flask's test client (no Terraform)."""

from __future__ import annotations

import base64
from typing import Any

from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.archives import tar_of

PSK = "test-daemon-psk"
PARAMETERS = [
    {"name": "size", "type": "number", "mutable": True, "required": False, "default_value": "1",
     "validation_min": 1, "validation_max": 8, "validation_monotonic": "increasing", "options": []},
    {"name": "region", "type": "string", "mutable": False, "required": True, "default_value": "",
     "options": [{"name": "EU", "value": "eu"}, {"name": "US", "value": "us"}]},
]  # fmt: skip
# What a daemon's import reports: the start plan's resources marked persistent or ephemeral by the stop plan.
RESOURCES = {
    "start": [
        {"name": "home", "type": "terraform_data", "lifecycle": "persistent", "agents": []},
        {
            "name": "dev",
            "type": "terraform_data",
            "lifecycle": "ephemeral",
            "agents": [{"name": "main", "os": "linux", "arch": "amd64", "token": "t0k"}],
        },
    ],
    "stop": [{"name": "home", "type": "terraform_data", "agents": []}],
}


PSK_HEADERS = {"Slipway-Provisioner-PSK": PSK}


class FakeDaemon:
    """Registers with ``credential`` headers (the test PSK by default) and calls with them."""

    def __init__(
        self,
        client: FlaskClient,
        name: str = "d1",
        tags: dict[str, str] | None = None,
        credential: dict[str, str] | None = None,
        **registration: Any,
    ):
        self.client = client
        self.credential = credential or PSK_HEADERS
        body = {"name": name, "tags": tags or {}, **registration}
        reply = client.post("/api/v2/provisionerd/register", json=body, headers=self.credential)
        assert reply.status_code == 201, reply.json
        self.id, self.queues, self.tags = reply.json["daemon_id"], reply.json["queues"], reply.json["tags"]
        self.registration = reply.json

    def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {**self.credential, "Slipway-Provisioner-Daemon": self.id}
        return self.client.post(f"/api/v2/provisionerd{path}", json=body or {}, headers=headers)


def push_version(
    client: FlaskClient, admin: Persona, tags: dict[str, str] | None = None, organization: str = ""
) -> dict[str, Any]:
    """A version pushed (to the default organisation, or by Coder's path to ``organization``), waiting to import."""
    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
    upload = client.post("/api/v2/files", data=archive, headers={**admin.auth, "Content-Type": "application/x-tar"})
    assert upload.status_code == 201, upload.json
    body = {"file_id": upload.json["id"], "provisioner_tags": tags or {}}
    path = f"/api/v2/organizations/{organization}/templateversions" if organization else "/api/v2/templateversions"
    version = client.post(path, json=body, headers=admin.auth)
    assert version.status_code == 201, version.json
    return dict(version.json)


def running_import(client: FlaskClient, personas: dict[str, Persona]) -> tuple[FakeDaemon, str, str]:
    """A template import a fresh stand-in daemon has acquired: the daemon, the job's id and the version's id."""
    daemon = FakeDaemon(client)
    version = push_version(client, personas["bob"])
    assert daemon.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200
    return daemon, str(version["job"]["id"]), str(version["id"])


def held_first_build(
    client: FlaskClient, personas: dict[str, Persona], daemon: FakeDaemon, template: dict[str, Any], name: str = "ws"
) -> dict[str, Any]:
    """A workspace of carol's, created from ``template``, whose first build ``daemon`` has acquired."""
    body = {"template_id": template["id"], "name": name, "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    workspace: dict[str, Any] = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth).json
    assert daemon.call(f"/jobs/{workspace['latest_build']['job']['id']}/acquire").status_code == 200
    return workspace


def import_template(
    client: FlaskClient,
    personas: dict[str, Persona],
    daemon: FakeDaemon,
    *,
    name: str = "dev",
    external_auth: list[dict[str, Any]] | None = None,
    workspace_tags: dict[str, str] | None = None,
    presets: list[dict[str, Any]] | None = None,
    parameters: list[dict[str, Any]] | None = None,
    secrets: list[dict[str, str]] | None = None,
    organization: str = "",
) -> dict[str, Any]:
    bob = personas["bob"]
    version = push_version(client, bob, organization=organization)
    job_id = version["job"]["id"]
    acquired = daemon.call(f"/jobs/{job_id}/acquire")
    assert acquired.status_code == 200, acquired.json
    archive = acquired.json["template_import"]["archive"]
    assert tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'}) == base64.b64decode(archive)
    assert daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Setting up", "output": "hello"}]}).json == {
        "canceled": False,
        "stop_sending": False,
    }
    done = daemon.call(
        f"/jobs/{job_id}/complete",
        {
            "template_import": {
                "readme": "# Dev",
                "parameters": PARAMETERS if parameters is None else parameters,
                "variables": [{"name": "token", "sensitive": True, "default_value": "s3"}],
                "resources": RESOURCES,
                "external_auth": external_auth or [],
                "workspace_tags": workspace_tags or {},
                "presets": presets or [],
                "secrets": secrets or [],
            }
        },
    )
    assert done.status_code == 204, done.json
    template = client.post("/api/v2/templates", json={"name": name, "version_id": version["id"]}, headers=bob.auth)
    assert template.status_code == 201, template.json
    return dict(template.json)
