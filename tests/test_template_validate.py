"""`slipway templates validate -d DIR`: the daemon's import run locally (real Terraform, Slipway's coder provider, no
server) prints what a push would find, and exits 1 with Terraform's own diagnostics when the push would fail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import cli
from tests.support.site_template import local_with_site_app

# Real Terraform runs (init, plan, apply): not in `make test-quick`'s loop.
pytestmark = pytest.mark.terraform

REPO = Path(__file__).resolve().parent.parent
REQUIRED_PROVIDERS = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
"""


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # One cache for the module, as a person's ~/.cache: the provider is installed once and inits are reused.
    yield tmp_path_factory.mktemp("validate-cache")


def validate(cache_home: Path, *args: str) -> Result:
    runner = CliRunner()
    return runner.invoke(cli, ["templates", "validate", *args], env={"XDG_CACHE_HOME": str(cache_home)})


def template(tmp_path: Path, body: str) -> Path:
    (tmp_path / "main.tf").write_text(REQUIRED_PROVIDERS + body)
    return tmp_path


def test_a_good_template_lists_its_parameters_and_resources(cache_home: Path) -> None:
    result = validate(cache_home, "-d", str(REPO / "examples" / "local"))
    assert result.exit_code == 0, result.output
    assert "Shell (shell): string, radio, immutable, default 'sh', 2 options" in result.output
    assert "terraform_data.process[0] — agent main (apps: dev) — ephemeral when stopped" in result.output
    assert "No problems found" in result.output

    as_json = validate(cache_home, "-d", str(REPO / "examples" / "local"), "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    found = json.loads(as_json.stdout)
    assert found["ok"] is True and found["problems"] == []
    assert {parameter["name"] for parameter in found["parameters"]} == {"dev_port", "dev_share", "greeting", "shell"}


def test_a_provider_error_is_shown_as_terraform_prints_it(cache_home: Path, tmp_path: Path) -> None:
    directory = template(
        tmp_path, 'data "coder_parameter" "size" {\n  name    = "size"\n  type    = "number"\n  default = "abc"\n}\n'
    )
    result = validate(cache_home, "-d", str(directory))
    assert result.exit_code == 1, result.output
    assert "Problems (1):" in result.output
    assert "Error: Invalid parameter 'size'" in result.output
    assert "on main.tf line" in result.output and '"abc" is not a number' in result.output
    assert "Traceback" not in result.output


def test_a_required_variable_is_asked_for_and_then_taken(cache_home: Path, tmp_path: Path) -> None:
    directory = template(tmp_path, 'variable "region" {\n  type = string\n}\nresource "terraform_data" "x" {\n}\n')
    missing = validate(cache_home, "-d", str(directory))
    assert missing.exit_code == 1, missing.output
    assert "region" in missing.output and "--variable NAME=VALUE" in missing.output

    given = validate(cache_home, "-d", str(directory), "--variable", "region=eu")
    assert given.exit_code == 0, given.output
    assert "Variables: region (required)" in given.output and "terraform_data.x" in given.output


def test_presets_are_listed_with_their_values(cache_home: Path, tmp_path: Path) -> None:
    body = """
data "coder_parameter" "size" {
  name    = "size"
  type    = "number"
  default = 1
}
data "coder_workspace_preset" "big" {
  name       = "Big"
  default    = true
  parameters = { size = "8" }
  prebuilds {
    instances = 1
    expiration_policy {
      ttl = 7200
    }
    scheduling {
      timezone = "Europe/Berlin"
      schedule {
        cron      = "* 8-18 * * 1-5"
        instances = 3
      }
    }
  }
}
"""
    result = validate(cache_home, "-d", str(template(tmp_path, body)))
    assert result.exit_code == 0, result.output
    assert (
        "Presets (1):\n  Big (default): size=8; 1 prebuilt, replaced after 7200 s; by schedule (Europe/Berlin): 3 at "
        "'* 8-18 * * 1-5'\n" in result.output
    )
    as_json = json.loads(validate(cache_home, "-d", str(tmp_path), "-o", "json").stdout)
    assert [(preset["name"], preset["default"]) for preset in as_json["presets"]] == [("Big", True)]


def test_a_subdomain_app_is_valid_with_a_warning(cache_home: Path, tmp_path: Path) -> None:
    directory = local_with_site_app(tmp_path / "site")
    result = validate(cache_home, "-d", str(directory))
    assert result.exit_code == 0, result.output
    assert "Warning: app 'site' has subdomain = true" in result.output and "--wildcard-access-url" in result.output
    found = json.loads(validate(cache_home, "-d", str(directory), "-o", "json").stdout)
    assert found["ok"] is True and len(found["warnings"]) == 1
