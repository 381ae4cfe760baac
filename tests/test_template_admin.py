"""Template admin without friction: an upload publishes once its import succeeds, readable version names unique
per template, template settings and delete, archiving versions, and a version's source."""

from __future__ import annotations

import io
import re
import tarfile
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.catalog.models import TemplateVersion
from app.core.columns import utcnow
from app.core.extensions import db
from app.files.models import File
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import PARAMETERS, RESOURCES, FakeDaemon
from tests.support.web import csrf_token, sign_in

pytestmark = pytest.mark.databases("sqlite")

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


def create_workspace(api: FlaskClient, member: Persona, template: dict[str, Any], name: str = "ws") -> Any:
    body = {"template_id": template["id"], "name": name, "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    return api.post("/api/v2/workspaces", json=body, headers=member.auth)


def test_a_deprecated_template_makes_no_new_workspaces(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    template = published_template(api, FakeDaemon(api), bob)
    existing = create_workspace(api, carol, template, name="before")
    assert existing.status_code == 201
    message = {"deprecation_message": "Use dev2 instead."}
    assert api.patch(f"/api/v2/templates/{template['id']}", json=message, headers=carol.auth).status_code == 403
    changed = api.patch(f"/api/v2/templates/{template['id']}", json=message, headers=bob.auth)
    assert changed.status_code == 200 and changed.json["deprecated"] is True
    refused = create_workspace(api, carol, template)
    assert (
        refused.status_code == 403 and "deprecated" in refused.json["message"] and "Use dev2" in refused.json["message"]
    )
    # The create form's URL still answers, with why instead of a form; a POST to it is refused all the same.
    sign_in(client, "carol@example.com", PASSWORD)
    form_page = client.get("/workspaces/new?template=dev")
    text = form_page.get_data(as_text=True)
    assert form_page.status_code == 200 and 'id="template-deprecated"' in text and "Use dev2 instead." in text
    assert 'id="new-workspace-form"' not in text
    token = csrf_token(client, f"/workspaces/{existing.json['id']}")
    posted = client.post("/workspaces/new", data={"csrf_token": token, "template": "dev", "name": "after"})
    assert posted.status_code == 403 and "Use dev2 instead." in posted.get_data(as_text=True)
    assert [item["name"] for item in api.get("/api/v2/workspaces", headers=carol.auth).json] == ["before"]
    # Every workspace of the template says so on its page.
    notice = client.get(f"/workspaces/{existing.json['id']}").get_data(as_text=True)
    assert 'id="workspace-template-deprecated"' in notice and "Use dev2 instead." in notice
    bad = api.patch(f"/api/v2/templates/{template['id']}", json={"deprecation_message": 7}, headers=bob.auth)
    assert bad.status_code == 400 and bad.json["validations"][0]["field"] == "deprecation_message"
    api.patch(f"/api/v2/templates/{template['id']}", json={"deprecation_message": ""}, headers=bob.auth)
    assert create_workspace(api, carol, template).status_code == 201
    undeprecated = client.get(f"/workspaces/{existing.json['id']}").get_data(as_text=True)
    assert "workspace-template-deprecated" not in undeprecated


def test_the_settings_page_deprecates_and_links_to_delete(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, api = personas["bob"], app.test_client()
    published_template(api, FakeDaemon(api), bob)
    sign_in(client, "bob@example.com", PASSWORD)
    token = csrf_token(client, "/templates/dev/settings")
    form = {"csrf_token": token, "display_name": "Dev box", "description": "", "icon": "", "requirement_weeks": "1"}
    saved = client.post("/templates/dev/settings", data={**form, "deprecation_message": "Moved to dev2."})
    assert saved.status_code == 302
    page = client.get("/templates/dev").get_data(as_text=True)
    assert "Deprecated:" in page and "Moved to dev2." in page and "Create workspace" not in page
    assert 'href="/templates/dev/delete"' in client.get("/templates/dev/settings").get_data(as_text=True)
    bad = client.post("/templates/dev/settings", data={**form, "icon": "ftp://x", "deprecation_message": "kept"})
    assert bad.status_code == 400
    assert 'value="kept"' in bad.get_data(as_text=True)  # what was typed stays
    member = app.test_client()
    sign_in(member, "carol@example.com", PASSWORD)
    assert member.get("/templates/dev/settings").status_code == 403
    assert member.get("/templates/dev/delete").status_code == 403


def test_a_template_is_deleted_only_when_no_workspace_uses_it(app: Flask, personas: dict[str, Persona]) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    template = published_template(api, FakeDaemon(api), bob)
    assert create_workspace(api, carol, template).status_code == 201
    assert api.delete(f"/api/v2/templates/{template['id']}", headers=carol.auth).status_code == 403
    refused = api.delete(f"/api/v2/templates/{template['id']}", headers=bob.auth)
    assert refused.status_code == 409 and "carol/ws" in refused.json["message"]

    other = published_template(api, FakeDaemon(api, name="d2"), bob, name="spare")
    assert api.delete(f"/api/v2/templates/{other['id']}", headers=bob.auth).status_code == 204
    assert api.get(f"/api/v2/templates/{other['id']}", headers=bob.auth).status_code == 404
    assert templates_named(api, bob, "spare") == []
    assert [row["name"] for row in api.get("/api/v2/templates", headers=bob.auth).json] == ["dev"]
    versions = api.get(f"/api/v2/templateversions/{other['active_version_id']}", headers=bob.auth).json
    assert versions["archived"] is True  # its archive stops counting against storage
    assert api.delete(f"/api/v2/templates/{other['id']}", headers=bob.auth).status_code == 404
    # The name is free again.
    assert published_template(api, FakeDaemon(api, name="d3"), bob, name="spare")["name"] == "spare"


def test_the_delete_page_asks_for_the_name(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    template = published_template(api, FakeDaemon(api), bob)
    sign_in(client, "bob@example.com", PASSWORD)
    token = csrf_token(client, "/templates/dev/delete")
    wrong = client.post("/templates/dev/delete", data={"csrf_token": token, "name": "nope"})
    assert wrong.status_code == 400 and "Type dev to confirm" in wrong.get_data(as_text=True)
    assert client.post("/templates/dev/delete", data={"name": "dev"}).status_code == 400  # no CSRF token
    assert create_workspace(api, carol, template).status_code == 201
    in_use = client.get("/templates/dev/delete").get_data(as_text=True)
    assert "cannot be deleted while workspaces use it" in in_use and "carol/ws" in in_use
    refused = client.post("/templates/dev/delete", data={"csrf_token": token, "name": "dev"})
    assert refused.status_code == 409 and "carol/ws" in refused.get_data(as_text=True)

    published_template(api, FakeDaemon(api, name="d2"), bob, name="spare")
    done = client.post("/templates/spare/delete", data={"csrf_token": token, "name": "spare"})
    assert done.status_code == 302 and done.headers["Location"].endswith("/templates")
    assert "Template spare deleted." in client.get("/templates").get_data(as_text=True)
    assert client.get("/templates/spare").status_code == 404


def test_versions_are_archived_and_unarchived_one_at_a_time_or_failed_ones_in_bulk(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    daemon = FakeDaemon(api)
    template = published_template(api, daemon, bob)
    failed = [api_version(api, bob, template["id"]).json for _ in range(2)]
    for version in failed:
        finish_import(api, daemon, bob, version["id"], ok=False)
    good = api_version(api, bob, template["id"]).json
    finish_import(api, daemon, bob, good["id"])
    active = template["active_version_id"]

    # Members may not; the active version may not be archived.
    assert api.post(f"/api/v2/templateversions/{good['id']}/archive", headers=carol.auth).status_code == 403
    assert api.post(f"/api/v2/templateversions/{good['id']}/unarchive", headers=carol.auth).status_code == 403
    bulk = f"/api/v2/templates/{template['id']}/versions/archive"
    assert api.post(bulk, json={}, headers=carol.auth).status_code == 403
    assert api.post(f"/api/v2/templateversions/{active}/archive", headers=bob.auth).status_code == 409
    bad = api.post(bulk, json={"all": "yes"}, headers=bob.auth)
    assert bad.status_code == 400 and bad.json["validations"][0]["field"] == "all"

    # The page offers the failed ones in bulk.
    sign_in(client, "bob@example.com", PASSWORD)
    page = client.get("/templates/dev").get_data(as_text=True)
    assert "Archive failed (2)" in page
    token = csrf_token(client, "/templates/dev")
    assert client.post("/templates/dev/versions/archive", data={}).status_code == 400  # no CSRF token
    done = client.post("/templates/dev/versions/archive", data={"csrf_token": token})
    assert done.status_code == 302
    shown = client.get("/templates/dev").get_data(as_text=True)
    assert "Archived 2 failed versions" in shown and "Archive failed (" not in shown and "Unarchive" in shown
    for version in failed:
        assert api.get(f"/api/v2/templateversions/{version['id']}", headers=bob.auth).json["archived"] is True

    # Unarchive one through the page; --all archives the unused good one, never the active one.
    unarchived = client.post(f"/templates/versions/{failed[0]['id']}/unarchive", data={"csrf_token": token})
    assert unarchived.status_code == 302
    assert api.get(f"/api/v2/templateversions/{failed[0]['id']}", headers=bob.auth).json["archived"] is False
    everything = api.post(bulk, json={"all": True}, headers=bob.auth)
    assert everything.status_code == 200
    assert sorted(everything.json["archived_ids"]) == sorted([failed[0]["id"], good["id"]])
    assert api.post(bulk, json={}, headers=bob.auth).json["archived_ids"] == []
    again = api.post(f"/api/v2/templateversions/{good['id']}/unarchive", headers=bob.auth)
    assert again.status_code == 200 and again.json["archived"] is False


def test_a_version_a_workspace_is_on_is_not_archived(app: Flask, personas: dict[str, Persona]) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    daemon = FakeDaemon(api)
    template = published_template(api, daemon, bob)
    first = template["active_version_id"]
    assert create_workspace(api, carol, template).status_code == 201
    newer = api_version(api, bob, template["id"]).json
    finish_import(api, daemon, bob, newer["id"])
    promoted = api.patch(f"/api/v2/templates/{template['id']}/versions", json={"id": newer["id"]}, headers=bob.auth)
    assert promoted.status_code == 200
    refused = api.post(f"/api/v2/templateversions/{first}/archive", headers=bob.auth)
    assert refused.status_code == 409 and "carol/ws" in refused.json["message"]
    bulk = api.post(f"/api/v2/templates/{template['id']}/versions/archive", json={"all": True}, headers=bob.auth)
    assert bulk.json["archived_ids"] == []


def test_a_version_is_found_by_name(app: Flask, personas: dict[str, Persona]) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    template = published_template(api, FakeDaemon(api), bob)
    name = api.get(f"/api/v2/templateversions/{template['active_version_id']}", headers=bob.auth).json["name"]
    found = api.get(f"/api/v2/templates/{template['id']}/versions/{name}", headers=carol.auth)
    assert found.status_code == 200 and found.json["id"] == template["active_version_id"]
    missing = api.get(f"/api/v2/templates/{template['id']}/versions/nope", headers=bob.auth)
    assert missing.status_code == 404 and "no version named 'nope'" in missing.json["message"]


def test_a_version_archive_is_downloaded_by_admins(app: Flask, personas: dict[str, Persona]) -> None:
    bob, carol, api = personas["bob"], personas["carol"], app.test_client()
    template = published_template(api, FakeDaemon(api), bob)
    version = api.get(f"/api/v2/templateversions/{template['active_version_id']}", headers=bob.auth).json
    path = f"/api/v2/files/{version['job']['file_id']}"
    downloaded = api.get(path, headers=bob.auth)
    assert downloaded.status_code == 200 and downloaded.data == tar_of({"main.tf": MAIN_TF.decode()})
    assert api.get(path, headers=carol.auth).status_code == 403
    assert api.get("/api/v2/files/00000000-0000-0000-0000-000000000000", headers=bob.auth).status_code == 404


def tar_with(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def version_of(api: FlaskClient, daemon: FakeDaemon, admin: Persona, files: dict[str, bytes], **body: Any) -> Any:
    headers = {**admin.auth, "Content-Type": "application/x-tar"}
    upload = api.post("/api/v2/files", data=tar_with(files), headers=headers)
    version = api.post("/api/v2/templateversions", json={"file_id": upload.json["id"], **body}, headers=admin.auth)
    assert version.status_code == 201, version.json
    finish_import(api, daemon, admin, version.json["id"])
    return version.json


def test_the_source_tab_shows_a_versions_files_and_compares_two(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    old_files = {
        "main.tf": b'resource "terraform_data" "home" {}\n# <b>not markup</b>\n',
        "README.md": b"# Dev\n",
        "icon.png": b"\x89PNG\x00\x01binary",
        "../escape.tf": b"never listed\n",
    }
    first = version_of(api, daemon, bob, old_files, name="one")
    api.post("/api/v2/templates", json={"name": "dev", "version_id": first["id"]}, headers=bob.auth)
    template = templates_named(api, bob, "dev")[0]
    new_files = {
        **old_files,
        "main.tf": b'resource "terraform_data" "home" {}\n# changed\n',
        "scripts/run.sh": b"echo hi\n",
    }
    del new_files["README.md"]
    version_of(api, daemon, bob, new_files, name="two", template_id=template["id"])

    sign_in(client, "bob@example.com", PASSWORD)
    overview = client.get("/templates/dev").get_data(as_text=True)
    assert 'id="tab-source"' in overview and 'id="template-settings"' in overview
    page = client.get("/templates/dev/source?version=one")
    text = page.get_data(as_text=True)
    assert page.status_code == 200
    assert all(path in text for path in ("main.tf", "README.md", "icon.png")) and "escape.tf" not in text
    assert 'class="source-code"' in text and '<span class="kr">resource</span>' in text  # highlighted, by class
    assert "&lt;b&gt;not markup&lt;/b&gt;" in text and "<b>not markup</b>" not in text and "style=" not in text
    binary = client.get("/templates/dev/source?version=one&file=icon.png").get_data(as_text=True)
    assert f"binary, {len(old_files['icon.png'])} bytes" in binary
    assert "No file nope.tf in one" in client.get("/templates/dev/source?version=one&file=nope.tf").get_data(
        as_text=True
    )
    assert client.get("/templates/dev/source?version=nope").status_code == 404
    assert client.get("/templates/nope/source").status_code == 404

    compared = client.get("/templates/dev/diff?from=one&to=two").get_data(as_text=True)
    assert '<span class="diff-del">-# &lt;b&gt;not markup&lt;/b&gt;</span>' in compared
    assert '<span class="diff-add">+# changed</span>' in compared
    assert 'README.md</code> <span class="badge">removed' in compared
    assert 'scripts/run.sh</code> <span class="badge">added' in compared and "icon.png" not in compared
    # By default the active version (one, the older) against the newest other (two): the old default looked only
    # for an older one, found none, and said " and one have the same files." with a blank name.
    default = client.get("/templates/dev/diff").get_data(as_text=True)
    from_select, to_select = re.findall(r'<select name="(?:from|to)".*?</select>', default, re.S)
    assert '<option value="two" selected>' in from_select and '<option value="one" selected>' in to_select
    assert 'README.md</code> <span class="badge">added' in default and "have the same files" not in default
    same = client.get("/templates/dev/diff?from=two&to=two").get_data(as_text=True)
    assert "two is picked twice" in same and "have the same files" not in same
    unchanged = version_of(api, daemon, bob, new_files, name="three", template_id=template["id"])
    assert unchanged["name"] == "three"
    identical = client.get("/templates/dev/diff?from=two&to=three").get_data(as_text=True)
    assert "two and three have the same files." in identical

    member = app.test_client()
    sign_in(member, "carol@example.com", PASSWORD)
    assert member.get("/templates/dev/source").status_code == 403
    assert member.get("/templates/dev/diff").status_code == 403
    assert 'id="tab-source"' not in member.get("/templates/dev").get_data(as_text=True)


def test_a_version_whose_archive_was_freed_is_not_unarchived(app: Flask, personas: dict[str, Persona]) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    template = published_template(api, daemon, bob)
    older = template["active_version_id"]
    newer = api_version(api, bob, template["id"], name="newer").json
    finish_import(api, daemon, bob, newer["id"])
    api.patch(f"/api/v2/templates/{template['id']}/versions", json={"id": newer["id"]}, headers=bob.auth)
    # Freed directly here; the maintenance loop frees an archive once no version or workspace needs it.
    archived = api.post(f"/api/v2/templateversions/{older}/archive", headers=bob.auth)
    assert archived.status_code == 200
    with app.app_context():
        version = db.session.get(TemplateVersion, older)
        assert version is not None
        db.session.execute(update(File).where(File.id == version.job.file_id).values(data=b"", freed_at=utcnow()))
        db.session.commit()
    refused = api.post(f"/api/v2/templateversions/{older}/unarchive", headers=bob.auth)
    assert refused.status_code == 409 and "push the template again" in refused.json["message"]
    assert api.get(f"/api/v2/templateversions/{older}", headers=bob.auth).json["archived"] is True


def test_the_upload_form_takes_a_version_name_and_marks_a_bad_one(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    sign_in(client, "bob@example.com", PASSWORD)
    token = csrf_token(client, "/templates")

    def upload(version_name: str) -> Any:
        data = {"csrf_token": token, "name": "dev", "version_name": version_name, "publish": "on",
                "files": [(io.BytesIO(MAIN_TF), "main.tf")]}  # fmt: skip
        return client.post("/templates", data=data, content_type="multipart/form-data")

    assert upload("release-1").status_code == 302
    finish_import(api, daemon, bob, version_named(app, "release-1"))
    taken = upload("release-1")
    text = taken.get_data(as_text=True)
    # The next free name is suggested in the field, and the chosen file is kept for the next submit.
    assert taken.status_code == 400 and "already has a version named" in text and 'value="release-1-2"' in text
    kept = re.search(r'name="file_id" value="([^"]+)"', text)
    assert kept is not None and 'id="upload-file-kept"' in text
    again = {"csrf_token": token, "name": "dev", "version_name": "release-1-2", "publish": "on",
             "file_id": kept.group(1), "message": "the same files, renamed"}  # fmt: skip
    assert client.post("/templates", data=again, content_type="multipart/form-data").status_code == 302
    resubmitted = api.get(f"/api/v2/templateversions/{version_named(app, 'release-1-2')}", headers=bob.auth).json
    assert resubmitted["job"]["file_id"] == kept.group(1) and resubmitted["message"] == "the same files, renamed"
    bad = upload("has space")
    assert bad.status_code == 400 and "letters and digits" in bad.get_data(as_text=True)


def test_a_failed_versions_name_is_free_to_push_again(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    template = published_template(api, daemon, bob)
    failed = api_version(api, bob, template["id"], name="v2").json
    finish_import(api, daemon, bob, failed["id"], ok=False)
    # The API: the fixed push takes the name; the failed one is renamed with a suffix, its log kept.
    fixed = api_version(api, bob, template["id"], name="v2")
    assert fixed.status_code == 201 and fixed.json["name"] == "v2"
    renamed = api.get(f"/api/v2/templateversions/{failed['id']}", headers=bob.auth).json
    assert renamed["name"] == "v2-failed" and renamed["job"]["status"] == "failed"
    # A live import holds its name (it may yet succeed); a succeeded one too, with the next free name suggested.
    held = api_version(api, bob, template["id"], name="v2")
    assert held.status_code == 409 and "'v2-2'" in held.json["message"]
    # A second failure under the name: the web form frees it again, with the next suffix, and says so.
    finish_import(api, daemon, bob, fixed.json["id"], ok=False)
    sign_in(client, "bob@example.com", PASSWORD)
    token = csrf_token(client, "/templates")
    form = {"csrf_token": token, "name": "dev", "version_name": "v2", "files": [(io.BytesIO(MAIN_TF), "main.tf")]}
    pushed = client.post("/templates", data=form, content_type="multipart/form-data", follow_redirects=True)
    assert "The failed import that was named v2 is now v2-failed-2; its log is kept." in pushed.get_data(as_text=True)
    names = {item["name"] for item in api.get(f"/api/v2/templates/{template['id']}/versions", headers=bob.auth).json}
    assert {"v2", "v2-failed", "v2-failed-2"} <= names


def test_a_version_has_its_author_and_message(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, api, daemon = personas["bob"], app.test_client(), FakeDaemon(app.test_client())
    template = published_template(api, daemon, bob)
    archive = tar_of({"main.tf": MAIN_TF.decode()})
    upload = api.post("/api/v2/files", data=archive, headers={**bob.auth, "Content-Type": "application/x-tar"})
    body = {"file_id": upload.json["id"], "template_id": template["id"], "name": "v2"}
    pushed = api.post("/api/v2/templateversions", json={**body, "message": "  Go 1.23 <b>now</b>\n"}, headers=bob.auth)
    assert pushed.status_code == 201 and pushed.json["message"] == "Go 1.23 <b>now</b>"
    assert pushed.json["created_by"] == {"id": bob.id, "username": "bob"}
    first = api.get(f"/api/v2/templateversions/{template['active_version_id']}", headers=bob.auth).json
    assert first["message"] == "" and first["created_by"]["username"] == "bob"
    for bad in (7, "x" * 4097):
        refused = api.post("/api/v2/templateversions", json={**body, "name": "v3", "message": bad}, headers=bob.auth)
        assert refused.status_code == 400 and refused.json["validations"][0]["field"] == "message"
    sign_in(client, "carol@example.com", PASSWORD)
    page = client.get("/templates/dev").get_data(as_text=True)
    assert 'class="version-message">Go 1.23 &lt;b&gt;now&lt;/b&gt;</span>' in page and "by</span> bob" in page


def version_named(app: Flask, version_name: str) -> str:
    """The id of the version of this name (the only one in the test's database)."""
    with app.app_context():
        found = db.session.scalar(select(TemplateVersion.id).where(TemplateVersion.name == version_name))
    assert found is not None
    return str(found)
