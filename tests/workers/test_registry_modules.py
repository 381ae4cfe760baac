"""Coder's registry modules that issue 36 found failing, applied with our provider as a template uses them.

The seven region and instance-type pickers build their `option` blocks with a `dynamic` block over a filtered map,
inside a module, so Terraform validates them with the whole option list unknown. They are pinned copies
(tests/fixtures/registry_modules, with the registry's licence and commit); one template uses all seven, and each
transition is one `terraform apply`, on both Terraforms.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import REQUIRED_PROVIDERS, TemplateDir
from workers.coder_provider.parameter import parameter_env_name
from workers.terraform import TerraformBinary

MODULES = Path(__file__).parents[1] / "fixtures" / "registry_modules"

TEMPLATE = """
variable "aws_default" {
  type    = string
  default = "us-east-1"
}
variable "gcp_default" {
  type    = string
  default = "us-central1-a"
}

data "coder_workspace" "me" {}

module "aws_region" {
  source  = "./modules/coder-aws-region"
  default = var.aws_default
  exclude = ["ap-east-1", "me-south-1"]
}
module "azure_region" {
  source  = "./modules/coder-azure-region"
  default = "westeurope"
  exclude = ["westus"]
}
module "gcp_region" {
  source  = "./modules/coder-gcp-region"
  regions = ["us", "europe"]
  default = var.gcp_default
}
module "fly_region" {
  source  = "./modules/coder-fly-region"
  default = "ams"
  regions = ["ams", "iad", "sin"]
}
module "digitalocean_region" {
  source  = "./modules/umair-digitalocean-region"
  default = "ams3"
}
module "exoscale_zone" {
  source  = "./modules/whizus-exoscale-zone"
  default = "ch-gva-2"
  exclude = ["at-vie-2"]
}
module "exoscale_instance_type" {
  source        = "./modules/whizus-exoscale-instance-type"
  default       = "standard.medium"
  type_category = ["standard", "cpu"]
  exclude       = ["standard.tiny"]
}

locals {
  placement = {
    aws          = module.aws_region.value
    azure        = module.azure_region.value
    gcp_zone     = module.gcp_region.value
    gcp_region   = module.gcp_region.region
    fly          = module.fly_region.value
    digitalocean = module.digitalocean_region.value
    exoscale     = "${module.exoscale_zone.value}/${module.exoscale_instance_type.value}"
  }
}

# The workspace itself: it exists while the workspace runs, placed where the parameters say.
resource "terraform_data" "workspace" {
  count = data.coder_workspace.me.start_count
  input = local.placement
}

output "placement" {
  value = local.placement
}
"""

# What the workspace's owner chose: the rest take the module's default.
CHOSEN = {"aws_region": "eu-west-1", "flyio_region": "sin"}
PLACEMENT = {
    "aws": "eu-west-1",
    "azure": "westeurope",
    "gcp_zone": "us-central1-a",
    "gcp_region": "us-central1",  # the module cuts the zone's suffix off the parameter's value
    "fly": "sin",
    "digitalocean": "ams3",
    "exoscale": "ch-gva-2/standard.medium",
}


@pytest.fixture
def workspace(tmp_path: Path, terraform: TerraformBinary, coder_cli_config: Path) -> TemplateDir:
    shutil.copytree(MODULES, tmp_path / "modules", ignore=shutil.ignore_patterns("LICENSE", "*.md"))
    (tmp_path / "main.tf").write_text(REQUIRED_PROVIDERS + TEMPLATE)
    return TemplateDir(terraform, tmp_path, coder_cli_config).init()


def build_env(transition: str) -> dict[str, str]:
    env = {parameter_env_name(name): value for name, value in CHOSEN.items()}
    return {**env, "CODER_WORKSPACE_TRANSITION": transition}


def workspaces(state: Mapping[str, Any]) -> list[Any]:
    resources = (state.get("values") or {}).get("root_module", {}).get("resources", [])
    return [resource["values"]["input"] for resource in resources if resource["type"] == "terraform_data"]


def test_the_registry_pickers_apply_through_start_stop_and_destroy(workspace: TemplateDir) -> None:
    started = workspace.apply(build_env("start"))
    assert started["values"]["outputs"]["placement"]["value"] == PLACEMENT
    assert workspaces(started) == [PLACEMENT]

    stopped = workspace.apply(build_env("stop"))
    assert stopped["values"]["outputs"]["placement"]["value"] == PLACEMENT
    assert workspaces(stopped) == []

    destroyed = workspace.apply(build_env("destroy"), destroy=True)
    assert workspaces(destroyed) == []
    assert "values" not in destroyed or not destroyed["values"].get("root_module", {}).get("child_modules")


def test_a_picker_left_empty_reads_back_an_empty_string_as_coders_provider_does(workspace: TemplateDir) -> None:
    """Coder's provider gives an empty `value` (no default, no choice yet: a template import) as "", not null: the
    registry's own tests of these modules expect "" (gcp-region's "default output"), and modules do string work on
    it (gcp-region's `region` output cuts the zone's suffix off), which a null would fail."""
    plan = workspace.plan({"CODER_WORKSPACE_TRANSITION": "start", "TF_VAR_aws_default": "", "TF_VAR_gcp_default": ""})

    placement = plan["planned_values"]["outputs"]["placement"]["value"]
    assert (placement["aws"], placement["gcp_zone"], placement["gcp_region"]) == ("", "", "")
