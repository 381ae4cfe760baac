"""`slipway create --preset` against a real server whose daemons import with real Terraform: the template's presets
are recorded at import, the default one is used and said when none is named, `none` skips it, and an unknown name
lists the presets there are."""

from __future__ import annotations

from pathlib import Path

from tests.support.deployment import Deployment, running_deployment

TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}

data "coder_parameter" "region" {
  name    = "region"
  default = "eu"
}

data "coder_parameter" "size" {
  name    = "size"
  type    = "number"
  default = 1
}

data "coder_workspace_preset" "us" {
  name    = "US"
  default = true
  parameters = {
    region = "us"
  }
}

data "coder_workspace_preset" "big" {
  name = "Big"
  parameters = {
    size = 8
  }
}

resource "terraform_data" "home" {
  input = "${data.coder_parameter.region.value}-${data.coder_parameter.size.value}"
}
"""


def _values(deployment: Deployment, owner: str, name: str) -> dict[str, str]:
    build = deployment.workspace(owner, name)["latest_build"]
    with deployment.api(owner) as api:
        values = api.get(f"/workspacebuilds/{build['id']}/parameters").json()
    return {item["name"]: item["value"] for item in values}


def test_create_chooses_a_preset_by_name_by_default_or_none(tmp_path: Path) -> None:
    directory = tmp_path / "template"
    directory.mkdir()
    (directory / "main.tf").write_text(TEMPLATE)
    with running_deployment(tmp_path) as deployment:
        pushed = deployment.cli("alice", "templates", "push", "presets", "-d", str(directory))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr

        by_default = deployment.cli("carol", "create", "one", "-t", "presets", "-p", "region=eu", "-p", "size=2")
        assert by_default.returncode == 0, by_default.stdout + by_default.stderr
        assert "Preset 'US' applied: region=us" in by_default.stdout
        assert _values(deployment, "carol", "one") == {"region": "us", "size": "2"}

        named = deployment.cli("carol", "create", "two", "-t", "presets", "--preset", "Big")
        assert named.returncode == 0, named.stdout + named.stderr
        assert "Preset 'Big' applied: size=8" in named.stdout
        assert _values(deployment, "carol", "two") == {"region": "eu", "size": "8"}

        skipped = deployment.cli("carol", "create", "three", "-t", "presets", "--preset", "none")
        assert skipped.returncode == 0, skipped.stdout + skipped.stderr
        assert "Preset" not in skipped.stdout
        assert _values(deployment, "carol", "three") == {"region": "eu", "size": "1"}

        unknown = deployment.cli("carol", "create", "four", "-t", "presets", "--preset", "Huge")
        assert unknown.returncode == 1
        assert "Template presets has no preset named 'Huge' (its presets: Big, US)." in unknown.stderr
        with deployment.api("carol") as api:
            assert {w["name"] for w in api.get("/workspaces", params={"owner": "me"}).json()} == {"one", "two", "three"}
