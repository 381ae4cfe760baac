"""A flow that puts every kind of secret in the database (through the API and the stand-in daemon), for the tests
that look for them there and that rotate their keys."""

from __future__ import annotations

import base64
import json
from typing import Any

from flask import Flask

from app.auth.access import LOGIN_ID_KEY
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon
from tests.support.web import sign_in

SENSITIVE_VALUE = "db-password-7f3c9a2e51"
SENSITIVE_DEFAULT = "default-secret-0c8e2b4d"
AGENT_TOKEN = "agent-token-5d2e8f1a-9c47"
ENV_SECRET = "env-secret-3b9d7e21c4"
METADATA_SECRET = "metadata-secret-a41f0e6b"
# Not secret: proves that the raw dump does show what is stored in clear.
WORKSPACE_NAME = "leakcheck"
MAIN_TF = 'variable "db_password" {\n  type = string\n  sensitive = true\n}\n'


def agent(with_token: str = AGENT_TOKEN) -> dict[str, Any]:
    return {
        "name": "main",
        "os": "linux",
        "arch": "amd64",
        "token": with_token,
        "env": {"DB_PASSWORD": ENV_SECRET},
        "startup_script": f"export DB_PASSWORD={ENV_SECRET}",
    }


def resources() -> list[dict[str, Any]]:
    return [
        {
            "name": "dev",
            "type": "terraform_data",
            "agents": [agent()],
            "metadata": [
                {"key": "password", "value": METADATA_SECRET, "sensitive": True},
                {"key": "region", "value": "eu-west"},
            ],
        }
    ]


STATE = json.dumps(
    {
        "version": 4,
        "resources": [
            {"type": "coder_agent", "name": "main", "instances": [{"attributes": {"token": AGENT_TOKEN}}]},
            {"type": "terraform_data", "name": "db", "instances": [{"attributes": {"input": SENSITIVE_VALUE}}]},
        ],
    }
).encode()


def run_the_flow(app: Flask, personas: dict[str, Persona]) -> dict[str, str]:
    """Everything that puts a secret in the database; returns the secrets by what they are."""
    api = app.test_client()
    bob, carol = personas["bob"], personas["carol"]
    daemon = FakeDaemon(api)

    upload = api.post(
        "/api/v2/files", data=tar_of({"main.tf": MAIN_TF}), headers={**bob.auth, "Content-Type": "application/x-tar"}
    )
    assert upload.status_code == 201, upload.json
    version = api.post(
        "/api/v2/templateversions",
        json={
            "file_id": upload.json["id"],
            "user_variable_values": [{"name": "db_password", "value": SENSITIVE_VALUE}],
        },
        headers=bob.auth,
    )
    assert version.status_code == 201, version.json
    job_id = version.json["job"]["id"]
    acquired = daemon.call(f"/jobs/{job_id}/acquire")
    assert acquired.json["template_import"]["user_variable_values"] == [
        {"name": "db_password", "value": SENSITIVE_VALUE}
    ], "the daemon must still get the value"
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Planning", "output": f"db_password={SENSITIVE_VALUE}"}]})
    done = daemon.call(
        f"/jobs/{job_id}/complete",
        {
            "template_import": {
                "variables": [{"name": "db_password", "sensitive": True, "default_value": SENSITIVE_DEFAULT}],
                "resources": {"start": resources(), "stop": []},
            }
        },
    )
    assert done.status_code == 204, done.json
    template = api.post("/api/v2/templates", json={"name": "dev", "version_id": version.json["id"]}, headers=bob.auth)
    assert template.status_code == 201, template.json

    created = api.post(
        "/api/v2/workspaces",
        json={"template_id": template.json["id"], "name": WORKSPACE_NAME, "rich_parameter_values": []},
        headers=carol.auth,
    )
    assert created.status_code == 201, created.json
    start_job = created.json["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{start_job}/acquire").status_code == 200
    done = daemon.call(
        f"/jobs/{start_job}/complete",
        {"workspace_build": {"state": base64.b64encode(STATE).decode(), "resources": resources()}},
    )
    assert done.status_code == 204, done.json
    manifest = api.get("/api/v2/workspaceagents/me/manifest", headers={"Slipway-Agent-Token": AGENT_TOKEN})
    assert manifest.status_code == 200 and manifest.json["environment_variables"]["DB_PASSWORD"] == ENV_SECRET

    # The next build gets the state back (decrypted), and its failure quotes the secret.
    stop = api.post(f"/api/v2/workspaces/{created.json['id']}/builds", json={"transition": "stop"}, headers=carol.auth)
    assert stop.status_code == 201, stop.json
    payload = daemon.call(f"/jobs/{stop.json['job']['id']}/acquire").json["workspace_build"]
    assert base64.b64decode(payload["state"]) == STATE
    assert payload["variable_values"] == [{"name": "db_password", "value": SENSITIVE_VALUE}]
    failed = daemon.call(
        f"/jobs/{stop.json['job']['id']}/fail", {"error": f"local-exec failed: mysql -p{SENSITIVE_VALUE} exited 1"}
    )
    assert failed.status_code == 204, failed.json

    token = api.post("/api/v2/users/me/tokens", json={"name": "ci"}, headers=carol.auth)
    assert token.status_code == 201, token.json
    key = api.post("/api/v2/provisionerkeys", json={"name": "eu", "tags": {"region": "eu"}}, headers=bob.auth)
    assert key.status_code == 201, key.json
    browser = app.test_client()
    sign_in(browser, "dave@example.com", PASSWORD)
    with browser.session_transaction() as session:
        browser_secret = session[LOGIN_ID_KEY].split("-", 1)[1]
    return {
        "sensitive variable value": SENSITIVE_VALUE,
        "sensitive variable default": SENSITIVE_DEFAULT,
        "agent token": AGENT_TOKEN,
        "agent env secret": ENV_SECRET,
        "sensitive metadata value": METADATA_SECRET,
        "API token": token.json["token"].split("-", 1)[1],
        "provisioner key": key.json["key"],
        "session token": personas["alice"].token.split("-", 1)[1],
        "browser session": browser_secret,
    }
