"""carol's workspace w1 for the dev URL tests: one agent with subdomain, shared and path apps (in process, built
by the stand-in daemon; the agent never connects unless a test says so)."""

from __future__ import annotations

import base64
from typing import Any

from flask import Flask

from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template

AGENT_TOKEN = "4b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"
AGENT_HEADERS = {"Slipway-Agent-Token": AGENT_TOKEN}
AGENT = {
    "name": "main", "os": "linux", "arch": "amd64", "token": AGENT_TOKEN,
    "apps": [
        {"slug": "site", "display_name": "Site", "url": "http://localhost:8000", "subdomain": True},
        {"slug": "pub", "display_name": "Pub", "url": "http://localhost:8001", "subdomain": True, "share": "public"},
        {"slug": "team", "url": "http://localhost:8002", "subdomain": True, "share": "authenticated"},
        {"slug": "path", "url": "http://localhost:8003"},
    ],
}  # fmt: skip


def create_workspace(app: Flask, personas: dict[str, Persona]) -> dict[str, Any]:
    api = app.test_client()
    daemon = FakeDaemon(api)
    template = import_template(api, personas, daemon)
    created = api.post(
        "/api/v2/workspaces",
        json={
            "template_id": template["id"],
            "name": "w1",
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
        },
        headers=personas["carol"].auth,
    )
    assert created.status_code == 201, created.json
    job_id = created.json["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    resources = [{"name": "dev", "type": "terraform_data", "agents": [AGENT]}]
    state = base64.b64encode(b"{}").decode()
    done = daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"state": state, "resources": resources}})
    assert done.status_code == 204, done.json
    workspace = dict(created.json)
    workspace["template"] = template
    return workspace
