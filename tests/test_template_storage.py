"""Template storage quota: what each template admin's archives weigh, the 413 beyond it with the way out, archiving
versions (which frees their quota at once), and the maintenance loop freeing archives nothing needs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.catalog.models import TemplateVersion
from app.catalog.storage import free_unused_archives
from app.core.columns import utcnow
from app.core.config import SettingsError, load_settings
from app.core.extensions import db
from app.files.models import File, FileUpload
from app.provisioning.maintenance import run_maintenance
from app.provisioning.models import ProvisionerJob
from protocol.values import parse_size
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import PARAMETERS, RESOURCES, FakeDaemon
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

ARCHIVE_BYTES = 10240  # tar_of pads every small archive to one 10 KiB record
TAR = {"Content-Type": "application/x-tar"}


def archive(n: int) -> bytes:
    return tar_of({"main.tf": f'resource "terraform_data" "r{n}" {{}}\n'})


def with_quota(app: Flask, quota: int) -> None:
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], template_storage_quota=quota)


def upload(client: FlaskClient, person: Persona, data: bytes) -> Any:
    return client.post("/api/v2/files", data=data, headers={**person.auth, **TAR})


def uploaded(client: FlaskClient, person: Persona, data: bytes) -> str:
    reply = upload(client, person, data)
    assert reply.status_code == 201, reply.json
    return str(reply.json["id"])


def usage(client: FlaskClient, person: Persona) -> dict[str, int]:
    reply = client.get("/api/v2/users/me/template-storage", headers=person.auth)
    assert reply.status_code == 200, reply.json
    return dict(reply.json)


def new_version(client: FlaskClient, person: Persona, file_id: str, template_id: str | None = None) -> dict[str, Any]:
    body = {"file_id": file_id, **({"template_id": template_id} if template_id else {})}
    reply = client.post("/api/v2/templateversions", json=body, headers=person.auth)
    assert reply.status_code == 201, reply.json
    return dict(reply.json)


def imported(client: FlaskClient, daemon: FakeDaemon, version: dict[str, Any], *, ok: bool = True) -> None:
    """The stand-in daemon takes the version's import and ends it (succeeded, or failed)."""
    job_id = version["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    if not ok:
        assert daemon.call(f"/jobs/{job_id}/fail", {"error": "terraform init failed"}).status_code == 204
        return
    result = {"readme": "", "parameters": PARAMETERS, "variables": [], "resources": RESOURCES}
    assert daemon.call(f"/jobs/{job_id}/complete", {"template_import": result}).status_code == 204


def template_dev(client: FlaskClient, bob: Persona) -> tuple[dict[str, Any], dict[str, Any]]:
    """Template dev, imported from archive(1) by bob: (its first and active version, the template)."""
    first = new_version(client, bob, uploaded(client, bob, archive(1)))
    imported(client, FakeDaemon(client), first)
    template = client.post("/api/v2/templates", json={"name": "dev", "version_id": first["id"]}, headers=bob.auth).json
    return first, template


def test_members_can_neither_upload_nor_archive_nor_read_storage(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    carol, bob = personas["carol"], personas["bob"]
    version = new_version(client, bob, uploaded(client, bob, archive(1)))
    assert upload(client, carol, archive(2)).status_code == 403
    assert client.get("/api/v2/users/me/template-storage", headers=carol.auth).status_code == 403
    # A version of no template yet is its uploader's and template admins' alone: for others it does not exist.
    assert client.post(f"/api/v2/templateversions/{version['id']}/archive", headers=carol.auth).status_code == 404
    assert client.get("/api/v2/users/me/template-storage").status_code == 401


def test_an_upload_beyond_the_quota_is_refused_saying_usage_limit_and_the_way_out(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    with_quota(app, 25 * 1024)
    bob = personas["bob"]
    for n in (1, 2):
        uploaded(client, bob, archive(n))
    assert usage(client, bob) == {"used_bytes": 2 * ARCHIVE_BYTES, "archives": 2, "quota_bytes": 25 * 1024}
    refused = upload(client, bob, archive(3))
    assert refused.status_code == 413
    message = refused.json["message"]
    assert "take 20 KiB of your 25 KiB" in message and "needs 10 KiB more" in message
    assert "Archive the template versions you no longer need" in message and "--template-storage-quota" in message
    assert usage(client, bob)["archives"] == 2  # nothing was stored
    # Each template admin has a quota of their own; the owner too.
    uploaded(client, personas["alice"], archive(3))


def test_no_limit_when_the_quota_is_zero(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    with_quota(app, 0)
    for n in range(4):
        uploaded(client, personas["bob"], archive(n))
    assert usage(client, personas["bob"]) == {"used_bytes": 4 * ARCHIVE_BYTES, "archives": 4, "quota_bytes": 0}


def test_the_same_archive_costs_its_uploader_once_and_counts_for_each_uploader(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    with_quota(app, 15 * 1024)
    alice, bob = personas["alice"], personas["bob"]
    first = uploaded(client, bob, archive(1))
    assert uploaded(client, bob, archive(1)) == first  # at the quota's edge: no new bytes, no refusal
    new_version(client, bob, first)
    assert uploaded(client, bob, archive(1)) == first
    assert usage(client, bob)["used_bytes"] == ARCHIVE_BYTES
    assert uploaded(client, alice, archive(1)) == first  # stored once, but alice keeps it as well
    assert usage(client, alice)["used_bytes"] == ARCHIVE_BYTES
    assert upload(client, bob, archive(2)).status_code == 413


def test_archiving_versions_frees_their_quota_at_once(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    first, template = template_dev(client, bob)
    daemon = FakeDaemon(client, "d2")
    second = new_version(client, bob, uploaded(client, bob, archive(2)), template["id"])
    imported(client, daemon, second)
    with_quota(app, 2 * ARCHIVE_BYTES)
    assert upload(client, bob, archive(3)).status_code == 413
    archived = client.post(f"/api/v2/templateversions/{second['id']}/archive", headers=bob.auth)
    assert archived.status_code == 200 and archived.json["archived"] is True
    assert usage(client, bob)["used_bytes"] == ARCHIVE_BYTES
    uploaded(client, bob, archive(3))
    again = client.post(f"/api/v2/templateversions/{second['id']}/archive", headers=bob.auth)
    assert again.status_code == 200  # archiving twice changes nothing
    listed = client.get(f"/api/v2/templates/{template['id']}/versions", headers=bob.auth).json
    assert {version["id"]: version["archived"] for version in listed} == {first["id"]: False, second["id"]: True}


def test_versions_that_are_active_in_use_or_importing_stay(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, carol = personas["bob"], personas["carol"]
    first, template = template_dev(client, bob)
    active = client.post(f"/api/v2/templateversions/{first['id']}/archive", headers=bob.auth)
    assert active.status_code == 409 and "active version of dev" in active.json["message"]

    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    assert client.post("/api/v2/workspaces", json=body, headers=carol.auth).status_code == 201
    second = new_version(client, bob, uploaded(client, bob, archive(2)), template["id"])
    importing = client.post(f"/api/v2/templateversions/{second['id']}/archive", headers=bob.auth)
    assert importing.status_code == 409 and "still pending" in importing.json["message"]
    imported(client, FakeDaemon(client, "d2"), second)
    promoted = client.patch(f"/api/v2/templates/{template['id']}/versions", json={"id": second["id"]}, headers=bob.auth)
    assert promoted.status_code == 200
    in_use = client.post(f"/api/v2/templateversions/{first['id']}/archive", headers=bob.auth)
    assert in_use.status_code == 409 and "in use by workspaces (carol/ws)" in in_use.json["message"]


def test_an_archived_version_builds_nothing_and_cannot_become_active(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, carol = personas["bob"], personas["carol"]
    first, template = template_dev(client, bob)
    second = new_version(client, bob, uploaded(client, bob, archive(2)), template["id"])
    imported(client, FakeDaemon(client, "d2"), second)
    assert client.post(f"/api/v2/templateversions/{second['id']}/archive", headers=bob.auth).status_code == 200
    body = {
        "template_id": template["id"],
        "name": "ws",
        "template_version_id": second["id"],
        "rich_parameter_values": [{"name": "region", "value": "eu"}],
    }
    refused = client.post("/api/v2/workspaces", json=body, headers=carol.auth)
    assert refused.status_code == 400 and "is archived" in refused.json["message"]
    promote = client.patch(f"/api/v2/templates/{template['id']}/versions", json={"id": second["id"]}, headers=bob.auth)
    assert promote.status_code == 400 and "is archived" in promote.json["message"]


def _age(app: Flask, *, uploads: timedelta | None = None, jobs: timedelta | None = None) -> None:
    """Move uploads and job ends into the past, as if that much time had gone by."""
    with app.app_context():
        if uploads is not None:
            db.session.execute(update(FileUpload).values(uploaded_at=utcnow() - uploads))
        if jobs is not None:
            db.session.execute(
                update(ProvisionerJob)
                .where(ProvisionerJob.completed_at.is_not(None))
                .values(completed_at=utcnow() - jobs)
            )
        db.session.commit()


def _files(app: Flask) -> dict[str, tuple[bool, int]]:
    """Each file: (freed, bytes still stored)."""
    with app.app_context():
        return {file.id: (file.freed, len(file.data)) for file in db.session.scalars(select(File))}


def test_maintenance_frees_what_nothing_needs_and_keeps_the_rest(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob, carol = personas["bob"], personas["carol"]
    first, template = template_dev(client, bob)  # active
    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    client.post("/api/v2/workspaces", json=body, headers=carol.auth)
    daemon = FakeDaemon(client, "d2")
    archived = new_version(client, bob, uploaded(client, bob, archive(2)), template["id"])
    imported(client, daemon, archived)
    client.post(f"/api/v2/templateversions/{archived['id']}/archive", headers=bob.auth)
    failed = new_version(client, bob, uploaded(client, bob, archive(3)), template["id"])
    imported(client, daemon, failed, ok=False)
    unpublished = new_version(client, bob, uploaded(client, bob, archive(4)))
    imported(client, daemon, unpublished)
    pending = new_version(client, bob, uploaded(client, bob, archive(5)))
    never_used = uploaded(client, bob, archive(6))
    ids = {
        name: version["job"]["id"]
        for name, version in {"active": first, "archived": archived, "failed": failed, "unpublished": unpublished,
                              "pending": pending}.items()
    }  # fmt: skip
    with app.app_context():
        file_of = {name: db.session.get(ProvisionerJob, job_id).file_id for name, job_id in ids.items()}  # type: ignore[union-attr]
    file_of["never used"] = never_used

    settings = app.config["SLIPWAY_SETTINGS"]
    with app.app_context():
        assert free_unused_archives(settings) == 0  # every upload is within its hour
    _age(app, uploads=timedelta(minutes=61), jobs=timedelta(minutes=61))
    with app.app_context():
        assert free_unused_archives(settings) == 3
    files = _files(app)
    assert {name for name, file_id in file_of.items() if files[file_id][0]} == {"archived", "failed", "never used"}
    assert all(files[file_of[name]] == (True, 0) for name in ("archived", "failed", "never used"))
    assert usage(client, bob)["archives"] == 3  # active, unpublished (a day to publish it), pending

    _age(app, jobs=timedelta(days=2))
    with app.app_context():
        assert free_unused_archives(settings) == 1
        version = db.session.get(TemplateVersion, unpublished["id"])
        assert version is not None and version.archived_at is not None
    assert not _files(app)[file_of["pending"]][0] and not _files(app)[file_of["active"]][0]


def test_an_archive_a_workspace_is_on_stays_even_if_its_version_was_archived(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """A version archived while a workspace was being created on it (the check and the build raced): the
    workspace must still be able to stop and be deleted, which builds that version again."""
    bob, carol = personas["bob"], personas["carol"]
    first, template = template_dev(client, bob)
    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    client.post("/api/v2/workspaces", json=body, headers=carol.auth)
    with app.app_context():
        db.session.execute(update(TemplateVersion).values(archived_at=utcnow()))
        db.session.execute(update(ProvisionerJob).values(completed_at=utcnow() - timedelta(days=3)))
        db.session.commit()
    _age(app, uploads=timedelta(hours=2))
    with app.app_context():
        assert free_unused_archives(app.config["SLIPWAY_SETTINGS"]) == 0


def test_a_freed_archive_makes_no_version_until_uploaded_again(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    file_id = uploaded(client, bob, archive(1))
    _age(app, uploads=timedelta(hours=2))
    with app.app_context():
        run_maintenance(app.config["SLIPWAY_SETTINGS"])  # the loop `slipway server` runs every 10 s
    assert _files(app)[file_id] == (True, 0)
    assert usage(client, bob)["archives"] == 0
    stale = client.post("/api/v2/templateversions", json={"file_id": file_id}, headers=bob.auth)
    assert stale.status_code == 409 and "Upload it again" in stale.json["message"]
    assert uploaded(client, bob, archive(1)) == file_id
    assert _files(app)[file_id] == (False, ARCHIVE_BYTES)
    daemon = FakeDaemon(client)
    version = new_version(client, bob, file_id)
    acquired = daemon.call(f"/jobs/{version['job']['id']}/acquire")
    assert acquired.status_code == 200 and acquired.json["template_import"]["archive"]


def test_template_admins_see_their_usage_and_archive_from_the_template_page(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    api = app.test_client()
    _, template = template_dev(api, bob)
    second = new_version(api, bob, uploaded(api, bob, archive(2)), template["id"])
    imported(api, FakeDaemon(api, "d2"), second)
    sign_in(client, "bob@example.com", PASSWORD)
    catalog = client.get("/templates").get_data(as_text=True)
    assert "Your template storage: <strong>20 KiB of 1 GiB in 2 archives</strong>" in catalog
    page = client.get("/templates/dev").get_data(as_text=True)
    assert page.count(">Archive</button>") == 1  # the active version has none
    archived = post_form(client, f"/templates/versions/{second['id']}/archive", {}, token_from="/templates/dev")
    assert archived.status_code == 302 and archived.headers["Location"].endswith("/templates/dev")
    page = client.get("/templates/dev").get_data(as_text=True)
    assert "is archived" in page and ">archived</span>" in page and ">Archive</button>" not in page
    assert "20 KiB" not in client.get("/templates").get_data(as_text=True)

    member = app.test_client()
    sign_in(member, "carol@example.com", PASSWORD)
    assert "Your template storage" not in member.get("/templates").get_data(as_text=True)
    token = csrf_token(member, "/templates")
    forbidden = member.post(f"/templates/versions/{second['id']}/archive", data={"csrf_token": token})
    assert forbidden.status_code == 403
    no_csrf = client.post(f"/templates/versions/{second['id']}/archive")
    assert no_csrf.status_code == 400


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("1048576", 1048576), ("500MiB", 500 * 1024**2), ("1.5GiB", 1536 * 1024**2), ("2GB", 2 * 10**9)],
)
def test_sizes_read_like_the_other_settings(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1", "1w", "GiB", "1e9", "²"])
def test_a_bad_quota_is_refused_at_start_naming_the_variable(text: str) -> None:
    with pytest.raises(SettingsError, match="SLIPWAY_TEMPLATE_STORAGE_QUOTA.*like 500MiB"):
        load_settings({"SLIPWAY_TEMPLATE_STORAGE_QUOTA": text})
    assert load_settings({}).template_storage_quota == 1024**3
