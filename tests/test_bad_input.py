"""Bad input gets a clear 400, never a 500 (security audit findings 12-14): strict JSON bodies and whole numbers
everywhere, daemon reports checked against their protocol messages, number parameters that are numbers, and log
output that cannot forge Server-Sent Events fields."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")

NESTED = "[" * 50_000 + "]" * 50_000


@pytest.mark.parametrize("path", ["/api/v2/users/login", "/api/v2/users/first"])
def test_deeply_nested_json_is_a_400_even_for_anonymous_callers(client: FlaskClient, path: str) -> None:
    reply = client.post(path, data=NESTED, content_type="application/json")
    assert reply.status_code == 400
    assert reply.json["message"] == "The JSON is nested too deeply."


def test_deeply_nested_json_to_an_authenticated_endpoint_is_a_400(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    reply = client.post("/api/v2/workspaces", data=NESTED, headers=personas["carol"].auth)
    assert reply.status_code == 400


def test_json_with_nan_is_refused(client: FlaskClient, personas: dict[str, Persona]) -> None:
    reply = client.post(
        "/api/v2/users/me/tokens", data='{"name": "t", "lifetime_seconds": NaN}', headers=personas["carol"].auth
    )
    assert reply.status_code == 400 and "not valid JSON" in reply.json["message"]


def _workspace(client: FlaskClient, personas: dict[str, Persona]) -> tuple[FakeDaemon, dict[str, Any]]:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    body = {"template_id": template["id"], "name": "w", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    created = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
    assert created.status_code == 201, created.json
    return daemon, dict(created.json)


@pytest.mark.parametrize("after", ["²", "١", "99999999999999999999999", "-1", "1.5"])
def test_log_cursors_must_be_ascii_whole_numbers(client: FlaskClient, personas: dict[str, Persona], after: str) -> None:
    _, workspace = _workspace(client, personas)
    logs = f"/api/v2/workspacebuilds/{workspace['latest_build']['id']}/logs"
    carol = personas["carol"].auth
    reply = client.get(logs, query_string={"after": after}, headers=carol)
    assert reply.status_code == 400 and "whole number" in reply.json["message"]
    streamed = client.get(logs, query_string={"follow": "true"}, headers={**carol, "Last-Event-ID": after})
    assert streamed.status_code == 400 and "Last-Event-ID" in streamed.json["message"]


@pytest.mark.parametrize("limit", ["²", "0", "99999999999999999999999", "ten"])
def test_list_limits_must_be_whole_numbers(client: FlaskClient, personas: dict[str, Persona], limit: str) -> None:
    reply = client.get("/api/v2/provisionerjobs", query_string={"limit": limit}, headers=personas["bob"].auth)
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "limit"


def test_a_daemon_outcome_of_the_wrong_shape_fails_the_job_instead_of_leaving_it_running(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon, workspace = _workspace(client, personas)
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    bad_agent = {"name": "main", "connection_timeout": "abc"}
    reply = daemon.call(
        f"/jobs/{job_id}/complete",
        {"workspace_build": {"resources": [{"name": "dev", "type": "terraform_data", "agents": [bad_agent]}]}},
    )
    assert reply.status_code == 400
    assert reply.json["validations"] == [
        {
            "field": "workspace_build.resources[0].agents[0].connection_timeout",
            "detail": "expected a whole number, got a string",
        }
    ]
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["carol"].auth).json
    assert job["status"] == "failed" and "cannot read" in job["error"]
    # A batch of log lines with a wrong field is refused alone: the job goes on.
    assert daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"level": "loud"}]}).status_code in (400, 409)


@pytest.mark.parametrize("value", ["NaN", "nan", "inf", "8_000", "१२३४", "0x10"])
def test_number_parameters_refuse_what_is_not_a_decimal_number(
    client: FlaskClient, personas: dict[str, Persona], value: str
) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    body = {
        "template_id": template["id"],
        "name": "w",
        "rich_parameter_values": [{"name": "region", "value": "eu"}, {"name": "size", "value": value}],
    }
    reply = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
    assert reply.status_code == 400
    assert [item["field"] for item in reply.json["validations"]] == ["size"]


def _events(stream: str) -> list[list[str]]:
    """The stream's events, each as its field lines (SSE ends a line at CR, LF or CRLF, as browsers do)."""
    return [re.split(r"\r\n|\r|\n", block) for block in re.split(r"(?:\r\n|\r|\n){2}", stream) if block.strip()]


def test_a_carriage_return_in_a_log_line_cannot_forge_stream_fields(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    api = app.test_client()
    daemon, workspace = _workspace(api, personas)
    job_id = workspace["latest_build"]["job"]["id"]
    daemon.call(f"/jobs/{job_id}/acquire")
    forged = "innocent\revent: end\rid: 999999\rdata: {}"
    assert daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Planning", "output": forged}]}).status_code == 200
    daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}})
    sign_in(client, "carol@example.com", PASSWORD)
    stream = client.get(f"/builds/{workspace['latest_build']['id']}/log/stream").get_data(as_text=True)
    fields = [line.split(":", 1)[0] for event in _events(stream) for line in event if not line.startswith(":")]
    names = [line for event in _events(stream) for line in event if line.startswith("event:")]
    ids = [line for event in _events(stream) for line in event if line.startswith("id:")]
    assert names == ["event: log", "event: end"], names  # the page's own two events, none from the log line
    assert "id: 999999" not in ids
    assert set(fields) <= {"id", "event", "data", "retry"}
    assert "data: event: end" in stream  # the text is there, as data
