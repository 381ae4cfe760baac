"""A failed template import offers Retry and "Retry with debug logging" like a failed build: the same files are
imported again as a new version of the same template, with the same tags and variables, and the daemon is asked
for Terraform's debug log only when asked. For template admins and owners; members cannot reach it."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, push_version
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")


def failed_import(client: FlaskClient, personas: dict[str, Persona], daemon: FakeDaemon) -> dict[str, Any]:
    version = push_version(client, personas["bob"], tags={"region": "eu"})
    job_id = version["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{job_id}/fail", {"error": "terraform init failed"}).status_code == 204
    return version


@pytest.mark.parametrize("debug", [True, False])
def test_retry_imports_the_same_files_again_as_a_new_version(
    client: FlaskClient, personas: dict[str, Persona], debug: bool
) -> None:
    daemon = FakeDaemon(client, tags={"region": "eu"})
    failed = failed_import(client, personas, daemon)
    sign_in(client, "bob@example.com", PASSWORD)
    page = client.get(f"/templates/versions/{failed['id']}").get_data(as_text=True)
    assert 'id="retry-build"' in page and 'id="retry-build-debug"' in page
    # Without its CSRF token the form is refused.
    assert client.post(f"/templates/versions/{failed['id']}/retry", data={}).status_code == 400

    form = {"debug": "1"} if debug else {}
    retried = post_form(client, f"/templates/versions/{failed['id']}/retry", form, token_from="/templates")
    assert retried.status_code == 302
    new_id = retried.headers["Location"].rsplit("/", 1)[1]
    assert new_id != failed["id"]
    auth = personas["bob"].auth
    new = client.get(f"/api/v2/templateversions/{new_id}", headers=auth).json
    assert new["name"] != failed["name"] and new["job"]["status"] == "pending"
    assert new["job"]["tags"] == failed["job"]["tags"] and new["job"]["file_id"] == failed["job"]["file_id"]
    acquired = daemon.call(f"/jobs/{new['job']['id']}/acquire").json
    assert acquired["template_import"]["debug_logging"] is debug
    shown = client.get(f"/templates/versions/{new_id}").get_data(as_text=True)
    assert ("TF_LOG=debug" in shown) is debug


def test_only_a_failed_import_is_retried(client: FlaskClient, personas: dict[str, Persona]) -> None:
    pending = push_version(client, personas["bob"])
    sign_in(client, "bob@example.com", PASSWORD)
    path = f"/templates/versions/{pending['id']}"
    assert 'id="retry-build"' not in client.get(path).get_data(as_text=True)
    again = post_form(client, f"{path}/retry", {}, token_from="/templates")
    assert again.status_code == 302 and again.headers["Location"].endswith(path)
    assert "Only a failed import can be retried; this one is pending." in client.get(path).get_data(as_text=True)
    listed = client.get("/api/v2/provisionerjobs", headers=personas["bob"].auth).json
    assert len(listed) == 1


def test_members_cannot_retry_imports(client: FlaskClient, personas: dict[str, Persona]) -> None:
    failed = failed_import(client, personas, FakeDaemon(client, tags={"region": "eu"}))
    sign_in(client, "carol@example.com", PASSWORD)
    refused = post_form(client, f"/templates/versions/{failed['id']}/retry", {}, token_from="/templates")
    # A failed upload of no template yet is its uploader's and template admins' alone: for others it does not exist.
    assert refused.status_code == 404
