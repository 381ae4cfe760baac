"""No secret sits in the database in clear: after a real flow (a template pushed with a secret variable value and
imported, a workspace built whose state holds its agent's token, a failed build, an API token, a provisioner key,
a browser session), the raw database (the SQLite files' bytes; every PostgreSQL table read with plain SQL) holds
none of them, while the server still reads every one back."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import psycopg
from flask import Flask
from sqlalchemy.engine import make_url

from app.auth.access import LOGIN_ID_KEY
from app.core.extensions import db
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


def raw_database(app: Flask) -> bytes:
    """What a copy of the database shows: the SQLite files as they lie on disk, or every PostgreSQL row."""
    with app.app_context():
        url = make_url(db.engine.url)
        db.engine.dispose()
    if url.get_backend_name() == "sqlite":
        database = Path(str(url.database))
        return b"".join(path.read_bytes() for path in sorted(database.parent.glob(database.name + "*")))
    dump = []
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False)) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name"
        ).fetchall()
        for (table,) in tables:
            for row in connection.execute(f'SELECT * FROM "{table}"').fetchall():  # noqa: S608 - names from the catalog
                dump.extend(
                    bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode() for value in row
                )
    return b"\n".join(dump)


def test_no_secret_is_stored_in_clear(app: Flask, personas: dict[str, Persona]) -> None:
    secrets = run_the_flow(app, personas)
    raw = raw_database(app)
    assert WORKSPACE_NAME.encode() in raw and b"eu-west" in raw, "the dump shows what is stored in clear"
    leaked = [what for what, secret in secrets.items() if secret.encode() in raw]
    assert leaked == [], f"found in clear in the database: {', '.join(leaked)}"


def test_the_flow_reads_back_what_it_needs_and_shows_no_secret(app: Flask, personas: dict[str, Persona]) -> None:
    run_the_flow(app, personas)
    api = app.test_client()
    bob = personas["bob"]
    versions = api.get("/api/v2/templates", headers=bob.auth).json
    version_id = versions[0]["active_version_id"]
    variables = api.get(f"/api/v2/templateversions/{version_id}/variables", headers=bob.auth).json
    assert [(item["name"], item["sensitive"], item["default_value"]) for item in variables] == [
        ("db_password", True, "")
    ]
    workspace = api.get("/api/v2/workspaces", headers=personas["carol"].auth).json[0]
    build = workspace["latest_build"]
    assert build["job"]["status"] == "failed"
    # The error keeps its sense, without the secret (as the log masks it).
    assert build["job"]["error"] == "local-exec failed: mysql -p******** exited 1"
