"""`slipway templates pull|edit|delete|archive|versions archive|unarchive` against a real server with its built-in
daemons importing with real Terraform: readable version names, pulling a version's source into a directory or as a
tar, deprecating, archiving failed versions in bulk, and deleting a template only once no workspace uses it."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.deployment import Deployment, shared_deployment

TIDY = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "home" {
  count = data.coder_workspace.me.start_count
}
"""
SLIPWAY = shutil.which("slipway") or str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "slipway")
BROKEN = 'resource "terraform_data" "home" {\n'  # an unclosed block: the import fails


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return shared_deployment(tmp_path_factory)  # its templates are named for this module (tests/conftest.py)


def push(deployment: Deployment, tmp: Path, name: str, main_tf: str, *flags: str) -> Any:
    source = tmp / f"src-{len(list(tmp.iterdir()))}"
    source.mkdir()
    (source / "main.tf").write_text(main_tf)
    return deployment.cli("alice", "templates", "push", name, "-d", str(source), *flags, timeout=300)


def versions(deployment: Deployment, name: str) -> list[dict[str, Any]]:
    with deployment.api("alice") as api:
        [template] = api.get(f"/templates?name={name}").json()
        return list(api.get(f"/templates/{template['id']}/versions").json())


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout)


def refused(result: Any, words: str) -> None:
    assert result.returncode != 0, result.stdout
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_versions_archive_pull_and_names(deployment: Deployment, tmp_path: Path) -> None:
    ok(push(deployment, tmp_path, "tidy", TIDY, "--version-name", "first"))
    second_tf = TIDY + "# second\n"
    out = ok(push(deployment, tmp_path, "tidy", second_tf, "-m", "A second try"))
    [second, first] = versions(deployment, "tidy")
    assert first["name"] == "first" and re.fullmatch(r"[a-z]+-[a-z]+-2", second["name"]), second["name"]
    assert f"Version {second['name']} is now the active version of tidy." in out
    refused(push(deployment, tmp_path, "tidy", TIDY, "--version-name", "first"), "already has a version named 'first'")
    assert push(deployment, tmp_path, "tidy", BROKEN).returncode != 0
    assert push(deployment, tmp_path, "tidy", BROKEN).returncode != 0
    failed = [version["name"] for version in versions(deployment, "tidy") if version["job"]["status"] == "failed"]
    assert len(failed) == 2

    # Pull the active version into a directory, a named one as a tar; never into a directory with files.
    pulled = tmp_path / "pulled"
    assert f"Pulled version {second['name']} of tidy" in ok(
        deployment.cli("alice", "templates", "pull", "tidy", str(pulled))
    )
    assert (pulled / "main.tf").read_text() == second_tf
    refused(deployment.cli("alice", "templates", "pull", "tidy", str(pulled)), "is not empty")
    tar = subprocess.run(
        [SLIPWAY, "templates", "pull", "tidy", "--version", "first", "--tar"],
        env=deployment.cli_env("alice"), capture_output=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        member = archive.extractfile("main.tf")
        assert member is not None and member.read().decode() == TIDY
    zipped = subprocess.run(
        [SLIPWAY, "templates", "pull", "tidy", "--zip"],
        env=deployment.cli_env("alice"), capture_output=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    with zipfile.ZipFile(io.BytesIO(zipped)) as archive:
        assert archive.read("main.tf").decode() == second_tf
    refused(deployment.cli("alice", "templates", "pull", "tidy", "--tar", "--zip"), "choose one of --tar and --zip")
    refused(deployment.cli("alice", "templates", "pull", "tidy", "--version", "nope"), "no version named 'nope'")
    refused(deployment.cli("carol", "templates", "pull", "tidy", "--tar"), "")

    # Archive failed versions in bulk; one back and forth; the active one stays.
    assert "Archived 2 failed versions of tidy." in ok(deployment.cli("alice", "templates", "archive", "tidy"))
    ok(deployment.cli("alice", "templates", "versions", "unarchive", "tidy", failed[0]))
    ok(deployment.cli("alice", "templates", "versions", "archive", "tidy", failed[0], "first"))
    archived = {version["name"] for version in versions(deployment, "tidy") if version["archived"]}
    assert archived == {*failed, "first"}
    listed = ok(deployment.cli("alice", "templates", "versions", "list", "tidy"))
    assert "ARCHIVED" in listed.splitlines()[0] and "MESSAGE" in listed.splitlines()[0]
    assert re.search(rf"^{second['name']}\s+succeeded\s+yes\s.*alice\s+A second try$", listed, re.MULTILINE), listed
    for archived_name, status in (("first", "succeeded"), (failed[1], "failed")):  # not active: one "yes", archived
        assert re.search(rf"^{archived_name}\s+{status}\s+yes\s+\S", listed, re.MULTILINE), listed
    refused(deployment.cli("alice", "templates", "versions", "archive", "tidy", second["name"]), "active version")
    refused(deployment.cli("carol", "templates", "versions", "archive", "tidy", failed[1]), "")


def test_edit_deprecates_and_delete_waits_for_the_workspaces(deployment: Deployment, tmp_path: Path) -> None:
    ok(push(deployment, tmp_path, "used", TIDY))
    ok(push(deployment, tmp_path, "spare", TIDY))
    ok(deployment.cli("alice", "templates", "edit", "used", "--deprecated", "Moved to spare."))
    refused(deployment.cli("alice", "create", "ws", "-t", "used"), "Moved to spare.")
    ok(deployment.cli("alice", "templates", "edit", "used", "--deprecated", ""))
    ok(deployment.cli("alice", "create", "ws", "-t", "used", timeout=300))

    refused(deployment.cli("alice", "templates", "delete", "used", "-y"), "alice/ws")
    refused(deployment.cli("carol", "templates", "delete", "spare", "-y"), "")
    refused(deployment.cli("alice", "templates", "delete", "spare", input_text="n\n"), "Aborted")
    assert "Deleted template spare." in ok(deployment.cli("alice", "templates", "delete", "spare", input_text="y\n"))
    with deployment.api("alice") as api:
        names = [template["name"] for template in api.get("/templates").json()]
    assert "spare" not in names and "used" in names
    refused(deployment.cli("alice", "templates", "delete", "spare", "-y"), "No template named 'spare'")
