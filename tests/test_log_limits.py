"""What a job's log may hold: no secret values, lines of bounded length, at most 1 MiB per job."""

from __future__ import annotations

import base64
import urllib.parse

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.provisioning.models import ProvisionerJob
from tests.conftest import Persona
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon

pytestmark = pytest.mark.databases("sqlite")

SECRET = "s3cr3t-token-value"


def _version(client: FlaskClient, admin: Persona, variables: list[dict[str, str]]) -> dict[str, object]:
    archive = tar_of({"main.tf": 'resource "terraform_data" "x" {}\n'})
    upload = client.post("/api/v2/files", data=archive, headers=admin.auth).json
    body = {"file_id": upload["id"], "user_variable_values": variables}
    return dict(client.post("/api/v2/templateversions", json=body, headers=admin.auth).json)


def _outputs(client: FlaskClient, admin: Persona, version_id: object) -> list[str]:
    stored = client.get(f"/api/v2/templateversions/{version_id}/logs?limit=10000", headers=admin.auth).json
    return [line["output"] for line in stored]


def test_variable_values_are_redacted_before_storage(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob = personas["bob"]
    daemon = FakeDaemon(client)
    version = _version(client, bob, [{"name": "api_token", "value": SECRET}, {"name": "region", "value": "eu"}])
    job_id = version["job"]["id"]  # type: ignore[index]
    daemon.call(f"/jobs/{job_id}/acquire")
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"output": f"curl -H 'token: {SECRET}' in eu"}]})
    assert _outputs(client, bob, version["id"]) == ["curl -H 'token: ********' in eu"]


def test_encoded_and_recased_values_are_redacted_too(client: FlaskClient, personas: dict[str, Persona]) -> None:
    """What `upper(var.token)`, `base64encode(var.token)`, `urlencode(var.token)` and a hex dump print."""
    bob = personas["bob"]
    daemon = FakeDaemon(client)
    secret = "s3cr3t token/value"
    version = _version(client, bob, [{"name": "api_token", "value": secret}])
    job_id = version["job"]["id"]  # type: ignore[index]
    daemon.call(f"/jobs/{job_id}/acquire")
    printed = [
        secret.upper(),
        base64.b64encode(secret.encode()).decode(),
        urllib.parse.quote_plus(secret),
        secret.encode().hex(),
        base64.b64encode(b"Bearer " + secret.encode()).decode(),
    ]
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"output": f"token: {form}"} for form in printed]})
    outputs = _outputs(client, bob, version["id"])
    # Inside a longer base64 value, what stays are the characters that mix in the bytes around it ("Bearer ").
    assert outputs == ["token: ********"] * 4 + ["token: QmVhcmVyIH********Q=="]


def test_long_lines_are_truncated_and_the_log_is_capped(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    daemon = FakeDaemon(client)
    version = _version(client, bob, [])
    job_id = version["job"]["id"]  # type: ignore[index]
    daemon.call(f"/jobs/{job_id}/acquire")
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"output": "x" * 5000}]})
    first = _outputs(client, bob, version["id"])[0]
    assert len(first) == 1024 and first.endswith("[line truncated]")
    batch = [{"output": "y" * 1000} for _ in range(1000)]  # 1 MB per batch: the cap falls inside the second
    for _ in range(2):
        assert daemon.call(f"/jobs/{job_id}/logs", {"logs": batch}).status_code == 200
    outputs = _outputs(client, bob, version["id"])
    assert outputs[-1].startswith("Log limit of 1024 KiB reached")
    assert sum(len(output.encode()) for output in outputs[:-1]) <= 1024 * 1024
    with app.app_context():
        job = db.session.get(ProvisionerJob, job_id)
        assert job is not None and job.logs_overflowed and job.logs_dropped > 0
        dropped = job.logs_dropped
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"output": "more"}]})
    assert _outputs(client, bob, version["id"])[-1].startswith("Log limit")  # nothing stored after the notice
    with app.app_context():
        assert db.session.get(ProvisionerJob, job_id).logs_dropped == dropped + 1  # type: ignore[union-attr]
