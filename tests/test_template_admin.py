"""Template admin without friction: an upload publishes once its import succeeds, readable version names unique
per template, template settings and delete, archiving versions, and a version's source."""

from __future__ import annotations

import io
import re
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import PARAMETERS, RESOURCES, FakeDaemon
from tests.support.web import csrf_token, sign_in

MAIN_TF = b'resource "terraform_data" "home" {}\n'


def upload_form(client: FlaskClient, name: str, *, publish: bool, main_tf: bytes = MAIN_TF) -> str:
    """Upload through the templates page as a signed-in admin; returns the new version's id."""
    token = csrf_token(client, "/templates")
    data: dict[str, Any] = {"csrf_token": token, "name": name, "files": [(io.BytesIO(main_tf), "main.tf")]}
    if publish:
        data["publish"] = "on"
    response = client.post("/templates", data=data, content_type="multipart/form-data")
    assert response.status_code == 302, response.get_data(as_text=True)
    return response.headers["Location"].split("/templates/versions/")[1].split("?")[0]


def finish_import(api: FlaskClient, daemon: FakeDaemon, admin: Persona, version_id: str, *, ok: bool = True) -> None:
    job_id = api.get(f"/api/v2/templateversions/{version_id}", headers=admin.auth).json["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    if not ok:
        assert daemon.call(f"/jobs/{job_id}/fail", {"error": "terraform init failed"}).status_code == 204
        return
    result = {"readme": "", "parameters": PARAMETERS, "variables": [], "resources": RESOURCES}
    assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": result}).status_code == 204


def templates_named(api: FlaskClient, admin: Persona, name: str) -> list[dict[str, Any]]:
    return list(api.get(f"/api/v2/templates?name={name}", headers=admin.auth).json)


def test_an_upload_publishes_as_its_import_succeeds(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    sign_in(client, "bob@example.com", PASSWORD)
    assert 'name="publish" id="upload-publish" checked' in client.get("/templates").get_data(as_text=True)
    first = upload_form(client, "dev", publish=True)
    assert templates_named(api, bob, "dev") == []  # nothing is published before the import succeeds
    finish_import(api, daemon, bob, first)
    [template] = templates_named(api, bob, "dev")
    assert template["active_version_id"] == first
    page = client.get(f"/templates/versions/{first}").get_data(as_text=True)
    assert "Published: this is the active version of" in page and "Publish as a new template" not in page

    # A new version of it, published too; a failed one changes nothing.
    second = upload_form(client, "dev", publish=True)
    finish_import(api, daemon, bob, second)
    assert templates_named(api, bob, "dev")[0]["active_version_id"] == second
    failed = upload_form(client, "dev", publish=True)
    finish_import(api, daemon, bob, failed, ok=False)
    assert templates_named(api, bob, "dev")[0]["active_version_id"] == second


def test_an_upload_not_to_publish_waits_for_publish(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    sign_in(client, "bob@example.com", PASSWORD)
    version_id = upload_form(client, "review", publish=False)
    finish_import(api, daemon, bob, version_id)
    assert templates_named(api, bob, "review") == []
    page = client.get(f"/templates/versions/{version_id}?template_name=review").get_data(as_text=True)
    assert "Publish as a new template" in page and 'value="review"' in page


def test_a_bad_upload_keeps_the_publish_choice(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    sign_in(client, "bob@example.com", PASSWORD)
    token = csrf_token(client, "/templates")
    data = {"csrf_token": token, "name": "bad name!", "files": [(io.BytesIO(MAIN_TF), "main.tf")]}
    response = client.post("/templates", data=data, content_type="multipart/form-data")
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert "letters, digits" in page and 'id="upload-publish" >' in page  # unticked stays unticked


def api_version(api: FlaskClient, admin: Persona, template_id: str | None = None, name: str = "") -> Any:
    archive = tar_of({"main.tf": MAIN_TF.decode()})
    upload = api.post("/api/v2/files", data=archive, headers={**admin.auth, "Content-Type": "application/x-tar"})
    body = {"file_id": upload.json["id"], "name": name, **({"template_id": template_id} if template_id else {})}
    return api.post("/api/v2/templateversions", json=body, headers=admin.auth)


def published_template(api: FlaskClient, daemon: FakeDaemon, admin: Persona, name: str = "dev") -> dict[str, Any]:
    version = api_version(api, admin).json
    finish_import(api, daemon, admin, version["id"])
    reply = api.post("/api/v2/templates", json={"name": name, "version_id": version["id"]}, headers=admin.auth)
    assert reply.status_code == 201, reply.json
    return dict(reply.json)


def test_versions_get_readable_names_unique_in_their_template(app: Flask, personas: dict[str, Persona]) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    template = published_template(api, daemon, bob)
    first = api.get(f"/api/v2/templateversions/{template['active_version_id']}", headers=bob.auth).json
    assert re.fullmatch(r"[a-z]+-[a-z]+-1", first["name"]), first["name"]
    second = api_version(api, bob, template["id"]).json
    assert re.fullmatch(r"[a-z]+-[a-z]+-2", second["name"]), second["name"]

    pushed = api_version(api, bob, template["id"], name="release-1.2")
    assert pushed.status_code == 201 and pushed.json["name"] == "release-1.2"
    again = api_version(api, bob, template["id"], name="release-1.2")
    assert again.status_code == 409 and "already has a version named 'release-1.2'" in again.json["message"]
    taken_generated = api_version(api, bob, template["id"], name=second["name"])
    assert taken_generated.status_code == 409
    # Another template, or no template yet, may use the name.
    assert api_version(api, bob, name="release-1.2").status_code == 201
    for bad in ("has space", "-lead", "a..b", "x" * 65):
        reply = api_version(api, bob, template["id"], name=bad)
        assert reply.status_code == 400, bad
        assert reply.json["validations"][0]["field"] == "name"
