"""Routing by Terraform version: a template's required_version constraints, read from its archive when it is
uploaded, decide which daemons may take its import and builds; a daemon says its Terraform when it registers.
And routing by parameters: the create form says where builds with the chosen values would go.

The constraint syntax and its edge cases are unit tests; routing runs in-process on both databases with stand-in
daemons that report different versions.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.catalog.terraform_requirements import required_terraform
from app.core.errors import InvalidInput
from protocol.terraform_versions import ConstraintError, parse_constraints, satisfiable, satisfies
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")


@pytest.mark.parametrize(
    ("version", "constraints", "expected"),
    [
        ("1.11.4", ">= 1.12", False),
        ("1.15.5", ">= 1.12", True),
        ("1.12.0", ">= 1.12", True),
        ("1.9.8", "~> 1.9", True),
        ("2.0.0", "~> 1.9", False),
        ("1.9.8", "~> 1.9.2", True),
        ("1.10.0", "~> 1.9.2", False),
        ("1.6.0", ">= 1.6, < 2.0", True),
        ("1.6.0", "!= 1.6.0", False),
        ("1.6.0", "1.6.0", True),
        ("1.6.0", "= 1.6", True),
        ("1.13.0-beta1", ">= 1.12", False),  # a prerelease only satisfies constraints naming its own release
        ("1.13.0-beta1", ">= 1.13.0-alpha1", True),
        ("", ">= 1.0", False),  # a daemon that did not say its version runs no constrained template
        ("1.0.0", "", True),
    ],
)
def test_terraform_constraints(version: str, constraints: str, expected: bool) -> None:
    assert satisfies(version, constraints) is expected


def test_bad_and_impossible_constraints() -> None:
    with pytest.raises(ConstraintError, match="not a version"):
        parse_constraints(">= one.two")
    with pytest.raises(ConstraintError, match="not a version constraint"):
        parse_constraints(">= 1.2 3")
    assert satisfiable(">= 1.6, < 2.0") and satisfiable("~> 1.9.2, != 1.9.3")
    assert not satisfiable(">= 2.0, < 1.5") and not satisfiable("= 1.6.0, != 1.6.0") and not satisfiable("> 1.9, < 1.9")


TERRAFORM_BLOCK = 'terraform {\n  required_version = "%s"\n}\n'


def test_the_archive_says_what_it_requires_root_and_local_modules_alike() -> None:
    archive = tar_of({
        "main.tf": TERRAFORM_BLOCK % ">= 1.12" + 'module "m" {\n  source = "./modules/m"\n}\n',
        "modules/m/main.tf": TERRAFORM_BLOCK % "< 2.0",
        "README.md": "# not Terraform",
    })  # fmt: skip
    assert required_terraform(archive) == ">= 1.12, < 2.0"
    assert required_terraform(tar_of({"main.tf": 'resource "terraform_data" "x" {}\n'})) is None
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as bundle:
        bundle.writestr("main.tf", TERRAFORM_BLOCK % "~> 1.9")
    assert required_terraform(zipped.getvalue()) == "~> 1.9"
    with pytest.raises(InvalidInput, match=r"main.tf: required_version = '>= banana'"):
        required_terraform(tar_of({"main.tf": TERRAFORM_BLOCK % ">= banana"}))
    with pytest.raises(
        InvalidInput, match=r"No Terraform satisfies .* main.tf \(>= 2.0\), modules/m/main.tf \(< 1.5\)"
    ):
        required_terraform(
            tar_of({"main.tf": TERRAFORM_BLOCK % ">= 2.0", "modules/m/main.tf": TERRAFORM_BLOCK % "< 1.5"})
        )


def upload(client: FlaskClient, admin: Persona, files: dict[str, str]) -> Any:
    archive = tar_of(files)
    stored = client.post("/api/v2/files", data=archive, headers={**admin.auth, "Content-Type": "application/x-tar"})
    assert stored.status_code == 201, stored.json
    return client.post("/api/v2/templateversions", json={"file_id": stored.json["id"]}, headers=admin.auth)


def test_an_impossible_requirement_is_refused_at_upload_with_the_reason(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    refused = upload(client, personas["bob"], {"main.tf": TERRAFORM_BLOCK % ">= 2.0, < 1.0"})
    assert refused.status_code == 400 and "No Terraform satisfies" in refused.json["message"], refused.json


def test_jobs_go_only_to_daemons_whose_terraform_satisfies_the_template(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    bob = personas["bob"]
    old = FakeDaemon(client, "old", terraform_binary="terraform", terraform_version="1.11.4")
    version = upload(client, bob, {"main.tf": TERRAFORM_BLOCK % ">= 1.12"})
    assert version.status_code == 201, version.json
    job = version.json["job"]
    assert job["required_terraform"] == ">= 1.12"
    # Only the old daemon is online: the job says exactly why it waits.
    waiting = client.get(f"/api/v2/provisionerjobs/{job['id']}", headers=bob.auth).json
    assert waiting["available_workers"] == 0
    assert waiting["waiting_for_terraform"] == "needs terraform >= 1.12; daemons have terraform 1.11.4"
    assert old.call("/jobs/wait", {"timeout_seconds": 0}).status_code == 204
    refused = old.call(f"/jobs/{job['id']}/acquire")
    assert (
        refused.status_code == 403
        and "needs terraform >= 1.12; this daemon runs terraform 1.11.4" in (refused.json["message"])
    )
    listed = {item["name"]: item for item in client.get("/api/v2/provisionerdaemons", headers=bob.auth).json}
    assert listed["old"]["terraform"] == {"binary": "terraform", "version": "1.11.4"}
    # "Who would build it": by tags and by Terraform, before anything is pushed.
    serving = client.get("/api/v2/provisionerdaemons?tags={}&terraform=>%3D 1.12", headers=bob.auth)
    assert serving.status_code == 200 and serving.json == []
    older = client.get("/api/v2/provisionerdaemons?terraform=< 1.12", headers=bob.auth).json
    assert [item["name"] for item in older] == ["old"]
    bad = client.get("/api/v2/provisionerdaemons?terraform=>%3D one", headers=bob.auth)
    assert bad.status_code == 400 and "not a version" in bad.json["message"]

    new = FakeDaemon(client, "new", terraform_binary="tofu", terraform_version="1.15.5")
    ready = client.get(f"/api/v2/provisionerjobs/{job['id']}", headers=bob.auth).json
    assert ready["available_workers"] == 1 and ready["queue_position"] == 1 and ready["waiting_for_terraform"] == ""
    offer = new.call("/jobs/wait", {"timeout_seconds": 0})
    assert offer.status_code == 200 and offer.json["job_id"] == job["id"]
    assert new.call(f"/jobs/{job['id']}/acquire").status_code == 200


def test_the_create_form_says_where_builds_with_the_chosen_values_go(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """data "coder_workspace_tags" computes region=<the region parameter>; only an eu daemon is online."""
    daemon = FakeDaemon(client, "eu-1", {"region": "eu"})
    import_template(client, personas, daemon, name="regional", workspace_tags={"region": "${region}"})
    sign_in(client, personas["carol"].email, PASSWORD)
    page = client.get("/workspaces/new?template=regional").get_data(as_text=True)
    assert 'id="build-routing"' in page
    served = client.get("/workspaces/new/routing?template=regional&param.region=eu").get_data(as_text=True)
    assert 'id="routing-ok"' in served and "region=eu" in served and "(1 online)" in served
    unserved = client.get("/workspaces/new/routing?template=regional&param.region=us").get_data(as_text=True)
    assert 'id="routing-none"' in unserved and "No provisioner serves <strong>region=us</strong>" in unserved
    # And the builds themselves carry the computed tag (region is immutable here: one workspace per region).
    for region in ("eu", "us"):
        body = {"template_id": _template_id(client, personas), "name": f"ws-{region}",
                "rich_parameter_values": [{"name": "region", "value": region}]}  # fmt: skip
        created = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
        assert created.status_code == 201, created.json
        assert created.json["latest_build"]["job"]["tags"]["region"] == region


def _template_id(client: FlaskClient, personas: dict[str, Persona]) -> str:
    return str(client.get("/api/v2/templates?name=regional", headers=personas["carol"].auth).json[0]["id"])
