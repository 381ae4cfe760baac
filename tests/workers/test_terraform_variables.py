"""Reading a template's variables and README statically, as a template import does."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.provisionerd import TemplateVariable
from workers.terraform import (
    TemplateSyntaxError,
    read_readme,
    read_variables,
    required_variables_missing,
)


def test_variables_are_read_with_types_defaults_and_flags(tmp_path: Path) -> None:
    (tmp_path / "b_main.tf").write_text(
        """
variable "region" {
  type        = string
  description = "Where the \\"workspace\\" runs"
  default     = "eu-west"
}

variable "cpus" {
  type    = number
  default = 2
}

variable "labels" {
  type    = map(string)
  default = { team = "platform", tier = "dev" }
}

variable "api_token" {
  type      = string
  sensitive = true
}

variable "nullable" {
  type    = string
  default = null
}

resource "terraform_data" "x" {
  input = var.region
}
"""
    )
    (tmp_path / "a_first.tf").write_text('variable "enabled" {\n  default = true\n}\n')
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "ignored.tf").write_text('variable "in_a_module" {}\n')

    variables = read_variables(tmp_path)

    assert variables == [
        TemplateVariable(
            name="enabled", type="", description="", default_value="true", required=False, sensitive=False
        ),
        TemplateVariable(
            name="region",
            type="string",
            description='Where the "workspace" runs',
            default_value="eu-west",
            required=False,
            sensitive=False,
        ),
        TemplateVariable(
            name="cpus", type="number", description="", default_value="2", required=False, sensitive=False
        ),
        TemplateVariable(
            name="labels",
            type="map(string)",
            description="",
            default_value='{"team":"platform","tier":"dev"}',
            required=False,
            sensitive=False,
        ),
        TemplateVariable(
            name="api_token", type="string", description="", default_value="", required=True, sensitive=True
        ),
        TemplateVariable(
            name="nullable", type="string", description="", default_value="", required=True, sensitive=False
        ),
    ]
    assert required_variables_missing(variables, {"region": "us-east"}) == ["api_token", "nullable"]
    assert required_variables_missing(variables, {"api_token": "t", "nullable": ""}) == []


def test_a_syntax_error_names_the_file_and_position(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text('variable "ok" {}\n')
    (tmp_path / "broken.tf").write_text('variable "x" {\n  default = \n}\n')

    with pytest.raises(TemplateSyntaxError, match=r"^broken\.tf: syntax error: .*line 2"):
        read_variables(tmp_path)


def test_a_template_without_variables_has_none(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text('resource "terraform_data" "x" {}\n')
    assert read_variables(tmp_path) == []


def test_readme_is_read_when_present(tmp_path: Path) -> None:
    assert read_readme(tmp_path) == ""
    (tmp_path / "README.md").write_text("# Docker workspace\n\nRuns in a container.\n")
    assert read_readme(tmp_path) == "# Docker workspace\n\nRuns in a container.\n"
