"""The template and workspace pages, with jobs completed by the stand-in daemon."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.daemon import RESOURCES, FakeDaemon, import_template
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")


def test_member_creates_and_watches_a_workspace(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    api = app.test_client()
    daemon = FakeDaemon(api)
    import_template(api, personas, daemon)
    sign_in(client, "carol@example.com", PASSWORD)
    catalog = client.get("/templates").get_data(as_text=True)
    assert "Create workspace" in catalog and "Upload a template" not in catalog
    form = client.get("/workspaces/new?template=dev").get_data(as_text=True)
    # Options with no form_type are radio buttons (Coder's default form type for them).
    assert 'type="radio" name="param.region" value="eu"' in form and 'type="number"' in form
    assert "Cannot be changed" in form

    refused = post_form(
        client,
        "/workspaces/new?template=dev",
        {"name": "ws", "param.region": "mars"},
        token_from="/workspaces/new?template=dev",
    )
    assert refused.status_code == 400 and "must be defined as one of options" in refused.get_data(as_text=True)
    created = post_form(
        client,
        "/workspaces/new",
        {"template": "dev", "name": "ws", "param.region": "eu"},
        token_from="/workspaces/new?template=dev",
    )
    assert created.status_code == 302
    build_page = client.get(created.headers["Location"]).get_data(as_text=True)
    assert "build #1 start" in build_page and "status-pending" in build_page
    assert 'sse-connect="' in build_page and "/log/stream?after=0" in build_page

    job_id = api.get("/api/v2/workspaces", headers=personas["carol"].auth).json[0]["latest_build"]["job"]["id"]
    daemon.call(f"/jobs/{job_id}/acquire")
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Planning infrastructure", "output": "Plan: 2 to add"}]})
    running = client.get(created.headers["Location"]).get_data(as_text=True)
    assert "Plan: 2 to add" in running and "status-running" in running and "sse-connect" in running
    daemon.call(
        f"/jobs/{job_id}/complete",
        {"workspace_build": {"state": base64.b64encode(b"{}").decode(), "resources": RESOURCES["start"]}},
    )
    finished = client.get(created.headers["Location"]).get_data(as_text=True)
    assert "status-succeeded" in finished and "sse-connect" not in finished  # nothing left to follow

    listing = client.get("/workspaces").get_data(as_text=True)
    assert "ws" in listing and "status-running" in listing
    workspace_id = api.get("/api/v2/workspaces", headers=personas["carol"].auth).json[0]["id"]
    page = client.get(f"/workspaces/{workspace_id}").get_data(as_text=True)
    assert 'class="agent-name">main<' in page and 'value="stop"' in page
    stop = client.post(
        f"/workspaces/{workspace_id}/builds",
        data={"transition": "stop", "csrf_token": csrf_token(client, f"/workspaces/{workspace_id}")},
    )
    assert stop.status_code == 302 and "/builds/" in stop.headers["Location"]

    dave = app.test_client()
    sign_in(dave, "dave@example.com", PASSWORD)
    assert dave.get(f"/workspaces/{workspace_id}").status_code == 404
    assert dave.get(stop.headers["Location"]).status_code == 404


def test_template_admin_uploads_through_the_form(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "bob@example.com", PASSWORD)
    token = csrf_token(client, "/templates")
    files = [
        (io.BytesIO(b'resource "terraform_data" "x" {}\n'), "main.tf"),
        (io.BytesIO(b"# Hello\n<script>x</script>"), "README.md"),
    ]
    response = client.post(
        "/templates",
        data={"csrf_token": token, "name": "dev", "tags": "env=prod", "variables": "region=eu", "files": files},
        content_type="multipart/form-data",
    )
    assert response.status_code == 302, response.get_data(as_text=True)
    version_page = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "Waiting for a provisioner daemon" in version_page
    version = app.test_client().get("/api/v2/templates", headers=personas["bob"].auth).json
    assert version == []  # nothing is published before the import succeeds

    bad = client.post(
        "/templates",
        data={"csrf_token": token, "name": "dev", "files": [(io.BytesIO(b"junk"), "x.tar")]},
        content_type="multipart/form-data",
    )
    assert bad.status_code == 400 and "not a tar or zip archive" in bad.get_data(as_text=True)
    no_files = client.post("/templates", data={"csrf_token": token, "name": "dev"}, content_type="multipart/form-data")
    assert no_files.status_code == 400

    member = app.test_client()
    sign_in(member, "carol@example.com", PASSWORD)
    # A version of no template yet is its uploader's and the template admins': for others it does not exist.
    assert member.get(response.headers["Location"]).status_code == 404
    assert (
        member.post("/templates", data={"csrf_token": csrf_token(member, "/templates"), "name": "x"}).status_code == 403
    )


def test_readme_is_rendered_safely(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    api = app.test_client()
    template = import_template(api, personas, FakeDaemon(api))
    sign_in(client, "carol@example.com", PASSWORD)
    page = client.get(f"/templates/{template['name']}").get_data(as_text=True)
    assert "<h1>Dev</h1>" in page and "persistent" in page and "ephemeral" in page


def test_page_stream_continues_stages_and_ends_with_every_line(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    api = app.test_client()
    daemon = FakeDaemon(api)
    template = import_template(api, personas, daemon)
    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    build = api.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth).json["latest_build"]
    job_id = build["job"]["id"]
    sign_in(client, "carol@example.com", PASSWORD)
    page = client.get(f"/builds/{build['id']}").get_data(as_text=True)
    assert 'id="log-empty"' in page and "Queued, position 1 of 1" in page

    daemon.call(f"/jobs/{job_id}/acquire")
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Planning infrastructure", "output": "one"}]})
    cursor = page_cursor(client.get(f"/builds/{build['id']}").get_data(as_text=True))
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Planning infrastructure", "output": "two"}]})
    daemon.call(f"/jobs/{job_id}/logs", {"logs": [{"stage": "Starting workspace", "output": "three"}]})
    daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}})
    # The job has ended, so the stream replays what follows the page's cursor and closes with `end`.
    stream = client.get(f"/builds/{build['id']}/log/stream?after={cursor}").get_data(as_text=True)
    assert stream.startswith(": connected")
    log_event, end_event = stream.split("event: log\n")[1], stream.split("event: end\n")[1]
    assert f"id: {int(cursor) + 2}\nevent: log" in stream  # resumable after the last line it carries
    assert "two" in log_event and "three" in log_event and "one" not in log_event
    assert log_event.count('class="log-stage"') == 1  # only "Starting workspace": "two" continues the open stage
    assert 'hx-swap-oob="true"' in log_event and "-duration" in log_event  # the open stage's duration, now known
    assert "status-succeeded" in end_event and "Open workspace" in end_event and "Succeeded in" in end_event
    assert '<span class="badge' in end_event and "&lt;span" not in end_event  # markup, not escaped text

    dave = app.test_client()
    sign_in(dave, "dave@example.com", PASSWORD)
    assert dave.get(f"/builds/{build['id']}/log/stream").status_code == 404


def page_cursor(page: str) -> str:
    return page.split("after=")[1].split('"')[0]


def _running_workspace(app: Flask, personas: dict[str, Persona], name: str = "ws") -> dict[str, Any]:
    """Carol's workspace, its first build finished by the stand-in daemon (a delete is refused while one runs)."""
    api = app.test_client()
    daemon = FakeDaemon(api)
    template = import_template(api, personas, daemon)
    body = {"template_id": template["id"], "name": name, "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    workspace = api.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth).json
    job_id = workspace["latest_build"]["job"]["id"]
    daemon.call(f"/jobs/{job_id}/acquire")
    daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": RESOURCES["start"]}})
    return dict(workspace)


def _latest_transition(app: Flask, personas: dict[str, Persona], workspace_id: str) -> str:
    reply = app.test_client().get(f"/api/v2/workspaces/{workspace_id}", headers=personas["carol"].auth)
    return str(reply.json["latest_build"]["transition"])


def test_deleting_a_workspace_needs_its_name_typed(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    workspace = _running_workspace(app, personas)
    delete_page = f"/workspaces/{workspace['id']}/delete"
    sign_in(client, "carol@example.com", PASSWORD)
    page = client.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert f'href="{delete_page}"' in page and 'value="delete"' not in page
    form = client.get(delete_page).get_data(as_text=True)
    assert "Type <strong>ws</strong> to confirm" in form and 'name="csrf_token"' in form

    for typed in ("", "WS", "ws2", " ws"):
        wrong = post_form(client, delete_page, {"name": typed})
        assert wrong.status_code == 400, typed
        assert "Type the workspace&#39;s name, ws, to delete it." in wrong.get_data(as_text=True)
    assert _latest_transition(app, personas, workspace["id"]) == "start"  # nothing was deleted

    # The start/stop form cannot delete without the name either: it sends the person to the page that asks.
    skipped = post_form(
        client, f"/workspaces/{workspace['id']}/builds", {"transition": "delete"}, token_from=delete_page
    )
    assert skipped.status_code == 302 and skipped.headers["Location"].endswith(delete_page)
    assert _latest_transition(app, personas, workspace["id"]) == "start"

    deleted = post_form(client, delete_page, {"name": "ws"})
    assert deleted.status_code == 302 and deleted.headers["Location"] == "/workspaces"
    listing = client.get("/workspaces").get_data(as_text=True)
    assert "ws is being deleted." in listing
    assert _latest_transition(app, personas, workspace["id"]) == "delete"
    # A second delete while the first is queued is refused on the form, not with a 500.
    again = post_form(client, delete_page, {"name": "ws"})
    assert again.status_code == 409 and "already active" in again.get_data(as_text=True)


def test_only_who_may_act_on_a_workspace_reaches_its_delete_page(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    workspace = _running_workspace(app, personas)
    delete_page = f"/workspaces/{workspace['id']}/delete"
    # dave (a member) may not see carol's workspace; bob (template admin) may see it but not act on it.
    for person, status in (("dave", 404), ("bob", 403)):
        other = app.test_client()
        sign_in(other, f"{person}@example.com", PASSWORD)
        assert other.get(delete_page).status_code == status, person
        refused = other.post(delete_page, data={"name": "ws", "csrf_token": csrf_token(other, "/account")})
        assert refused.status_code == status, person
    assert _latest_transition(app, personas, workspace["id"]) == "start"
    # alice, a deployment owner, may delete anyone's workspace.
    sign_in(client, "alice@example.com", PASSWORD)
    assert post_form(client, delete_page, {"name": "ws"}).status_code == 302
    assert _latest_transition(app, personas, workspace["id"]) == "delete"
