"""Reading data "coder_workspace_tags" at import: what may be used in a tag, and what the server gets to evaluate."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.tags import render_tag_template
from workers.workspace_tags import WorkspaceTagsError, read_workspace_tags

HEADER = """
variable "env" {
  default = "prod"
}
locals {
  zone = "z-${var.env}"
  deep = "${local.zone}-x"
}
data "coder_parameter" "where" {
  name = "region"
}
"""


def tags_of(tmp_path: Path, tags: str, variables: dict[str, str] | None = None) -> dict[str, str]:
    (tmp_path / "main.tf").write_text(HEADER + 'data "coder_workspace_tags" "t" {\n  tags = {\n' + tags + "\n  }\n}\n")
    return read_workspace_tags(tmp_path, variables if variables is not None else {"env": "prod"})


def test_parameters_variables_locals_and_literals(tmp_path: Path) -> None:
    templates = tags_of(
        tmp_path,
        '"region" = data.coder_parameter.where.value\n"zone" = local.deep\n"env" = var.env\n'
        '"mixed" = "r-${data.coder_parameter.where.value}-$5"\n"n" = 3',
    )
    rendered = {key: render_tag_template(value, {"region": "eu"}) for key, value in templates.items()}
    assert rendered == {"region": "eu", "zone": "z-prod-x", "env": "prod", "mixed": "r-eu-$5", "n": "3"}
    assert tags_of(tmp_path, '"env" = var.env', {"env": "staging"}) == {"env": "staging"}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("terraform_data.home.id", "terraform_data.home.id cannot be used"),
        ("lower(data.coder_parameter.where.value)", "cannot be used"),
        ("data.coder_parameter.nowhere.value", 'there is no data "coder_parameter" "nowhere"'),
        ("var.missing", "variable 'missing' has no value"),
        ("local.missing", "there is no local 'missing'"),
        ("data.coder_workspace.me.name", "only parameters (data.coder_parameter.<name>.value), variables, locals"),
    ],
)
def test_anything_else_fails_the_import_naming_it(tmp_path: Path, expression: str, message: str) -> None:
    with pytest.raises(WorkspaceTagsError, match=r'data "coder_workspace_tags" "t": tag \'x\'') as raised:
        tags_of(tmp_path, f'"x" = {expression}')
    assert message in str(raised.value)


def test_a_template_without_them_has_none(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(HEADER)
    assert read_workspace_tags(tmp_path, {}) == {}
