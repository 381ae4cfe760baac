"""Bad input gets a clear 400, never a 500 (security audit findings 12-14): strict JSON bodies and whole numbers
everywhere, daemon reports checked against their protocol messages, number parameters that are numbers, and log
output that cannot forge Server-Sent Events fields."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.extensions import db
from app.usersecrets.models import UserSecret
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import post_form, sign_in

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


def _workspace(
    client: FlaskClient, personas: dict[str, Persona], secrets: list[dict[str, str]] | None = None
) -> tuple[FakeDaemon, dict[str, Any]]:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon, secrets=secrets)
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


@pytest.mark.parametrize(
    ("body", "field", "detail"),
    [
        (
            {"workspace_build": {"resources": [{"name": "dev", "type": "terraform_data",
                                                "agents": [{"name": "main", "connection_timeout": "abc"}]}]}},
            "workspace_build.resources[0].agents[0].connection_timeout",
            "expected a whole number, got a string",
        ),
        ({}, "workspace_build", "A workspace_build job's completion must carry its workspace_build result."),
        (
            {"template_import": {"resources": {"start": [], "stop": []}}},
            "workspace_build",
            "A workspace_build job's completion must carry its workspace_build result.",
        ),
    ],
)  # fmt: skip
def test_a_daemon_outcome_of_the_wrong_shape_is_a_400_naming_the_field_and_the_job_goes_on(
    client: FlaskClient, personas: dict[str, Persona], body: dict[str, Any], field: str, detail: str
) -> None:
    """Issue 34, L2: a body the server cannot read must not fail a build that may have worked (nor answer 204): the
    daemon logs the refusal, and the job ends by its next report or the hang timeout."""
    daemon, workspace = _workspace(client, personas)
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    reply = daemon.call(f"/jobs/{job_id}/complete", body)
    assert reply.status_code == 400
    assert reply.json["validations"] == [{"field": field, "detail": detail}]
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["carol"].auth).json
    assert job["status"] == "running" and not job["error"]
    # A batch of log lines with a wrong field is refused alone: the job goes on, and a good report still lands.
    assert daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"level": "loud"}]}).status_code == 400
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["carol"].auth).json
    assert job["status"] == "succeeded"


def test_a_malformed_failure_report_is_a_400_and_the_job_goes_on(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon, workspace = _workspace(client, personas)
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    reply = daemon.call(f"/jobs/{job_id}/fail", {"error": 5})
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "error"
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["carol"].auth).json
    assert job["status"] == "running"


def _running(client: FlaskClient, personas: dict[str, Persona]) -> dict[str, Any]:
    daemon, workspace = _workspace(client, personas)
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    return workspace


def _with_raw_number(body: dict[str, Any], field: str, number: str) -> str:
    """``body`` as JSON with ``field`` written as ``number`` as it is (json.dumps would write 1e20 as 1e+20)."""
    return json.dumps(body).replace(f'"{field}": null', f'"{field}": {number}')


# Issue 34, L2: each of these answered 500 (OverflowError from timedelta or datetime).
@pytest.mark.parametrize("ttl_ms", ["100000000000000000000", "1e20", "-100000000000000000000"])
def test_a_huge_ttl_is_a_400_on_the_ttl_api_and_on_create(
    client: FlaskClient, personas: dict[str, Persona], ttl_ms: str
) -> None:
    workspace, carol = _running(client, personas), personas["carol"].auth
    body = _with_raw_number({"ttl_ms": None}, "ttl_ms", ttl_ms)
    reply = client.put(f"/api/v2/workspaces/{workspace['id']}/ttl", data=body, headers=carol)
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "ttl_ms"
    values = [{"name": "region", "value": "eu"}]
    fields = {"template_id": workspace["template_id"], "name": "w2", "ttl_ms": None, "rich_parameter_values": values}
    create = _with_raw_number(fields, "ttl_ms", ttl_ms)
    reply = client.post("/api/v2/workspaces", data=create, headers=carol)
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "ttl_ms"


@pytest.mark.parametrize("deadline", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "9999-12-31T00:00:00Z"])
def test_a_deadline_out_of_range_is_a_400_on_extend(
    client: FlaskClient, personas: dict[str, Persona], deadline: str
) -> None:
    workspace = _running(client, personas)
    reply = client.put(
        f"/api/v2/workspaces/{workspace['id']}/extend", json={"deadline": deadline}, headers=personas["carol"].auth
    )
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == "deadline"


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("extend", "hours", "1e12"),
        ("extend", "hours", "inf"),
        ("extend", "hours", "-inf"),
        ("extend", "hours", "1e300"),
        ("extend", "hours", "nan"),
        ("schedule", "ttl_hours", "inf"),
        ("schedule", "ttl_hours", "1e300"),
        ("schedule", "ttl_hours", "1e308"),
    ],
)
def test_huge_or_infinite_hours_on_the_schedule_card_are_refused_with_a_message(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], path: str, field: str, value: str
) -> None:
    workspace = _running(client, personas)
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)
    page = f"/workspaces/{workspace['id']}"
    reply = post_form(pages, f"{page}/{path}", {field: value}, token_from=page)
    if path == "schedule":  # the refused form is shown again, with every edit kept
        assert reply.status_code == 400
        shown = reply.get_data(as_text=True)
    else:  # back to the page, which says why
        assert reply.status_code == 302
        shown = pages.get(page).get_data(as_text=True)
    assert "number of hours" in shown


@pytest.mark.parametrize("field", ["value", "description"])
@pytest.mark.parametrize("text", [r"a\ud800b", r"a\u0000b"])
def test_a_secret_holding_a_lone_surrogate_or_a_nul_is_refused(
    client: FlaskClient, personas: dict[str, Persona], field: str, text: str
) -> None:
    """Issue 34, L2 and L5: a lone surrogate was a 500 (UnicodeEncodeError); a NUL was stored, and then every build
    of the person failed with "embedded null byte", stop and delete included."""
    body = {"name": "token", "value": "s3cret-value", "env_name": "TOKEN"}
    raw = json.dumps(body)[:-1] + f', "{field}": "{text}"}}'
    secrets = "/api/v2/users/me/secrets"
    reply = client.post(secrets, data=raw, headers=personas["carol"].auth)
    assert reply.status_code == 400, reply.json
    assert reply.json["validations"][0]["field"] == field
    assert client.get(secrets, headers=personas["carol"].auth).json == []
    created = client.post(secrets, json=body, headers=personas["carol"].auth)
    assert created.status_code == 201
    update = "{" + f'"{field}": "{text}"' + "}"
    reply = client.patch(f"{secrets}/token", data=update, headers=personas["carol"].auth)
    assert reply.status_code == 400 and reply.json["validations"][0]["field"] == field


def test_the_account_form_refuses_a_nul_in_a_secret(app: Flask, personas: dict[str, Persona]) -> None:
    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)
    form = {"name": "token", "value": "abc\x00def", "description": "", "env_name": "TOKEN", "file_path": ""}
    reply = post_form(pages, "/account/secrets", form, token_from="/account")
    assert reply.status_code == 400
    assert "NUL character" in reply.get_data(as_text=True)


def test_a_stored_secret_holding_a_nul_does_not_block_the_persons_builds(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], caplog: pytest.LogCaptureFixture
) -> None:
    """A NUL stored before values were checked is left out of the build's environment (with a warning), so the
    person's builds, stop and delete included, can run: the environment could not carry it."""
    secrets = "/api/v2/users/me/secrets"
    for name, env in (("bad", "BAD"), ("good", "GOOD")):
        body = {"name": name, "value": f"{name}-secret-value", "env_name": env}
        assert client.post(secrets, json=body, headers=personas["carol"].auth).status_code == 201
    with app.app_context():
        secret = db.session.scalar(select(UserSecret).where(UserSecret.name == "bad"))
        assert secret is not None
        secret.value = "before\x00after"
        db.session.commit()
    # The template declares both (a build gets only the secrets its template declares).
    daemon, workspace = _workspace(client, personas, secrets=[{"env": "BAD"}, {"env": "GOOD"}])
    acquired = daemon.call(f"/jobs/{workspace['latest_build']['job']['id']}/acquire")
    assert acquired.status_code == 200
    env = acquired.json["workspace_build"]["secret_env"]
    assert env == {"CODER_SECRET_ENV_GOOD": "good-secret-value"}
    assert "secret 'bad' of user" in caplog.text and "NUL" in caplog.text


# "9" * 5000: Python's int() refuses over 4,300 digits with a ValueError of its own (a 500, issue 34 L2).
@pytest.mark.parametrize("value", ["NaN", "nan", "inf", "8_000", "१२३४", "0x10", "9" * 5000, "9" * 20])
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
