"""Unknown values reach our provider wherever Terraform may send them, and it checks only what it knows.

Terraform validates a module with all its variables unknown, and plans with values that depend on resources not yet
created still unknown: a whole block list (a `dynamic` block over an unknown `for_each`, as in every registry region
picker), an attribute inside a block, a map or one of its elements, a string known only by its prefix (a refined
unknown), or a value that will turn out null. The table below is built from the provider's own schema, so a new
attribute or block joins it by itself: each case is one resource or data source of a valid profile with one
attribute or block made unknown (or null). All cases go through one `terraform validate` and one `terraform plan`
on the bundled Terraform; a smaller case runs on both Terraforms.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from tf.schema import Attribute, NestedBlock
from tf.types import Map, String

from tests.workers.conftest import REQUIRED_PROVIDERS, TemplateDir
from workers.coder_provider import CoderProvider
from workers.terraform import TerraformBinary, bundled_terraform

UUID = "8d0a1c7e-5b7f-4c1e-9a53-2f4b6c8d9e01"

# A valid configuration of every resource and data source that sets every argument and block its schema has (more
# than one where arguments exclude each other). Nested blocks are lists of instances.
PROFILES: dict[str, list[dict[str, Any]]] = {
    "resource.coder_agent": [
        {
            "os": "linux",
            "arch": "amd64",
            "auth": "token",
            "dir": "/home/coder",
            "env": {"EDITOR": "vim"},
            "startup_script": "echo start",
            "startup_script_behavior": "blocking",
            "shutdown_script": "echo stop",
            "connection_timeout": 120,
            "troubleshooting_url": "https://example.com/help",
            "motd_file": "/etc/motd",
            "order": 1,
            "api_key_scope": "all",
            "login_before_ready": True,
            "startup_script_timeout": 300,
            "shutdown_script_timeout": 300,
            "metadata": [
                {"key": "cpu", "display_name": "CPU", "script": "echo 1", "interval": 10, "timeout": 1, "order": 1}
            ],
            "display_apps": [
                {
                    "vscode": True,
                    "vscode_insiders": False,
                    "web_terminal": True,
                    "ssh_helper": True,
                    "port_forwarding_helper": True,
                }
            ],
            "resources_monitoring": [
                {
                    "memory": [{"enabled": True, "threshold": 80}],
                    "volume": [{"path": "/home", "enabled": True, "threshold": 90}],
                }
            ],
        }
    ],
    "resource.coder_agent_instance": [{"agent_id": "agent", "instance_id": "i-0123"}],
    "resource.coder_app": [
        {
            "agent_id": "agent",
            "slug": "web",
            "display_name": "Web",
            "name": "web",
            "icon": "/icon/code.svg",
            "url": "http://localhost:8080",
            "share": "owner",
            "subdomain": False,
            "relative_path": False,
            "order": 1,
            "hidden": False,
            "open_in": "tab",
            "group": "Tools",
            "tooltip": "A web app",
            "healthcheck": [{"url": "http://localhost:8080/health", "interval": 5, "threshold": 6}],
        },
        {"agent_id": "agent", "slug": "top", "command": "top"},
        {"agent_id": "agent", "slug": "docs", "url": "https://example.com", "external": True},
    ],
    "resource.coder_env": [{"agent_id": "agent", "name": "EDITOR", "value": "vim", "merge_strategy": "replace"}],
    "resource.coder_metadata": [
        {
            "resource_id": "box",
            "hide": False,
            "icon": "/icon/box.svg",
            "daily_cost": 2,
            "item": [{"key": "region", "value": "eu", "sensitive": False}],
        }
    ],
    "resource.coder_script": [
        {
            "agent_id": "agent",
            "display_name": "Backup",
            "script": "echo backup",
            "icon": "/icon/backup.svg",
            "cron": "0 0 22 * * *",
            "log_path": "/tmp/backup.log",
            "start_blocks_login": False,
            "run_on_start": True,
            "run_on_stop": True,
            "timeout": 60,
        }
    ],
    "resource.coder_ai_task": [{"app_id": UUID}, {"sidebar_app": [{"id": UUID}]}],
    "resource.coder_external_agent": [{"agent_id": "agent"}],
    "resource.coder_devcontainer": [
        {"agent_id": "agent", "workspace_folder": "/src", "config_path": "/src/.devcontainer/devcontainer.json"}
    ],
    "data.coder_parameter": [
        {
            "name": "size",
            "display_name": "Size",
            "description": "How big",
            "type": "number",
            "form_type": "radio",
            "mutable": True,
            "default": "5",
            "icon": "/icon/size.svg",
            "order": 1,
            "ephemeral": False,
            "styling": "{}",
            "option": [
                {"name": "Five", "value": "5", "description": "Medium", "icon": "/icon/five.svg"},
                {"name": "Six", "value": "6"},
            ],
            "validation": [{"min": 1, "max": 10, "monotonic": "increasing", "error": "out of range"}],
        },
        {"name": "word", "type": "string", "default": "hello", "validation": [{"regex": "^h", "error": "h first"}]},
    ],
    "data.coder_workspace": [{}],
    "data.coder_workspace_owner": [{}],
    "data.coder_provisioner": [{}],
    "data.coder_task": [{}],
    "data.coder_external_auth": [{"id": "github", "optional": True}],
    "data.coder_workspace_tags": [{"tags": {"cluster": "eu"}}],
    "data.coder_secret": [
        {"env": "API_KEY", "help_message": "Add an API key"},
        {"file": "~/.key", "help_message": "k"},
    ],
    "data.coder_workspace_preset": [
        {
            "name": "small",
            "description": "A small one",
            "icon": "/icon/small.svg",
            "default": False,
            "parameters": {"size": "5"},
            "prebuilds": [
                {
                    "instances": 1,
                    "expiration_policy": [{"ttl": 3600}],
                    "scheduling": [{"timezone": "UTC", "schedule": [{"cron": "* 8-18 * * 1-5", "instances": 2}]}],
                }
            ],
        }
    ],
}


class Kind(StrEnum):
    """How a case makes its value unknown (or null), given the valid value it turns into once known. `var.known`
    is a bool and `var.blank` an empty string, both unknown while Terraform validates and, in the `late` module,
    while it plans."""

    KNOWN = "known"  # the profile as it is
    UNKNOWN = "unknown"  # known ? value : null
    REFINED = "refined"  # "value${blank}": Terraform 1.6+ sends an unknown refined by its known prefix
    ELEMENT = "element"  # a map whose elements are unknown
    NULL = "null"
    UNKNOWN_NULL = "unknown_null"  # known ? null : value
    BLOCKS = "blocks"  # a dynamic block over an unknown for_each: the whole block list is unknown


# The kinds that stay valid once known, whatever the rest of the configuration says; the null ones are only
# validated (a null can make another argument required, which a plan then rightly refuses).
PLANNED = (Kind.KNOWN, Kind.UNKNOWN, Kind.REFINED, Kind.ELEMENT, Kind.BLOCKS)


@dataclass(frozen=True)
class Case:
    address: str  # resource.coder_app or data.coder_parameter
    profile: int
    path: tuple[str | int, ...]  # the argument or block made unknown, e.g. ("option", 0, "icon")
    kind: Kind

    @property
    def label(self) -> str:
        return "_".join([self.address.split(".")[1], str(self.profile), *map(str, self.path), self.kind])


def schema_of(address: str) -> tuple[list[Attribute], list[NestedBlock]]:
    provider = CoderProvider()
    kind, type_name = address.split(".")
    classes = provider.get_resources() if kind == "resource" else provider.get_data_sources()
    (found,) = [cls for cls in classes if f"coder_{cls.get_name()}" == type_name]
    schema = found.get_schema()
    return list(schema.attributes), list(schema.block_types)


def configurable(attributes: list[Attribute]) -> list[Attribute]:
    return [a for a in attributes if a.required or a.optional]


def kinds_for(attribute: Attribute) -> list[Kind]:
    kinds = [Kind.UNKNOWN]
    if isinstance(attribute.type, String):
        kinds.append(Kind.REFINED)
    if isinstance(attribute.type, Map):
        kinds.append(Kind.ELEMENT)
    if not attribute.required:
        kinds += [Kind.NULL, Kind.UNKNOWN_NULL]
    return kinds


def cases_in(
    address: str, profile: int, values: Mapping[str, Any], schema: tuple[list[Attribute], list[NestedBlock]]
) -> Iterator[Case]:
    """One case per kind for every argument and block the profile sets, at any depth."""

    def walk(prefix: tuple[str | int, ...], values: Mapping[str, Any], attributes: Any, blocks: Any) -> Iterator[Case]:
        for attribute in configurable(attributes):
            if attribute.name in values:
                for kind in kinds_for(attribute):
                    yield Case(address, profile, (*prefix, attribute.name), kind)
        for block in blocks:
            if block.type_name in values:
                yield Case(address, profile, (*prefix, block.type_name), Kind.BLOCKS)
                inner = block.block
                yield from walk(
                    (*prefix, block.type_name, 0), values[block.type_name][0], inner.attributes, inner.block_types
                )

    attributes, blocks = schema
    yield from walk((), values, attributes, blocks)


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for address, profiles in PROFILES.items():
        schema = schema_of(address)
        for index, values in enumerate(profiles):
            cases.append(Case(address, index, (), Kind.KNOWN))
            cases.extend(cases_in(address, index, values, schema))
    return cases


def hcl(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(key)} = {hcl(item)}" for key, item in value.items()) + " }"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def unknown(value: Any, kind: Kind) -> str:
    """The expression for a value made unknown in the given way (or null)."""
    if kind == Kind.UNKNOWN:  # not `known ? 1 : 1`, which Terraform refines to the known 1
        return f"var.known ? {hcl(value)} : null"
    if kind == Kind.REFINED:
        return json.dumps(value)[:-1] + '${var.blank}"'
    if kind == Kind.ELEMENT:
        return "{ " + ", ".join(f"{json.dumps(k)} = {unknown(v, Kind.UNKNOWN)}" for k, v in value.items()) + " }"
    if kind == Kind.NULL:
        return "null"
    assert kind == Kind.UNKNOWN_NULL
    return f"var.known ? null : {hcl(value)}"


def render_body(values: Mapping[str, Any], blocks: list[NestedBlock], case: Case, at: tuple[str | int, ...]) -> str:
    lines = []
    nested = {block.type_name: block for block in blocks}
    for name, value in values.items():
        here = (*at, name)
        if name not in nested:
            lines.append(f"{name} = {unknown(value, case.kind) if case.path == here else hcl(value)}")
            continue
        inner = nested[name].block.block_types
        if case.path == here:  # the whole block list unknown: a dynamic block over an unknown for_each
            content = render_body(values[name][0], inner, case, (*here, "dynamic"))
            lines.append(f'dynamic "{name}" {{\n for_each = var.known ? [1] : []\n content {{\n{content}\n}}\n}}')
            continue
        for index, instance in enumerate(value):
            lines.append(f"{name} {{\n{render_body(instance, inner, case, (*here, index))}\n}}")
    return "\n".join(lines)


def render(cases: list[Case]) -> str:
    blocks = []
    for case in cases:
        kind, type_name = case.address.split(".")
        _, nested = schema_of(case.address)
        body = render_body(PROFILES[case.address][case.profile], nested, case, ())
        blocks.append(f'{kind} "{type_name}" "{case.label}" {{\n{body}\n}}')
    return "\n".join(blocks)


CASES_MODULE_HEAD = (
    REQUIRED_PROVIDERS
    + """
variable "known" {
  type = bool
}
variable "blank" {
  type = string
}
"""
)
ROOT = """
resource "terraform_data" "seed" {
  input = ""
}
# Known once Terraform plans: the module was validated with unknown variables and is planned with known ones.
module "early" {
  source = "./cases"
  known  = true
  blank  = ""
}
# Unknown until apply: the values depend on a resource not yet created.
module "late" {
  source = "./cases"
  known  = terraform_data.seed.output == ""
  blank  = terraform_data.seed.output
}
"""


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory, coder_cli_config: Path) -> TemplateDir:
    directory = tmp_path_factory.mktemp("unknowns")
    (directory / "cases").mkdir()
    (directory / "cases" / "main.tf").write_text(CASES_MODULE_HEAD)
    (directory / "main.tf").write_text(REQUIRED_PROVIDERS + ROOT)
    return TemplateDir(bundled_terraform(), directory, coder_cli_config).init()


def use_cases(table: TemplateDir, cases: list[Case]) -> None:
    (table.directory / "cases" / "main.tf").write_text(CASES_MODULE_HEAD + render(cases))


def test_the_table_covers_every_argument_and_block_of_the_schema() -> None:
    """A new argument or block is either in a profile (and so in the table) or this test names it."""
    covered = {(case.address, tuple(str(step) for step in case.path if isinstance(step, str))) for case in all_cases()}
    missing = []
    for address in PROFILES:

        def walk(prefix: tuple[str, ...], attributes: Any, blocks: Any) -> Iterator[tuple[str, ...]]:
            for attribute in configurable(attributes):
                yield (*prefix, attribute.name)
            for block in blocks:
                yield (*prefix, block.type_name)
                yield from walk((*prefix, block.type_name), block.block.attributes, block.block.block_types)

        attributes, blocks = schema_of(address)
        missing += [(address, path) for path in walk((), attributes, blocks) if (address, path) not in covered]
    provider = CoderProvider()
    types = {f"resource.coder_{cls.get_name()}" for cls in provider.get_resources()}
    types |= {f"data.coder_{cls.get_name()}" for cls in provider.get_data_sources()}
    assert missing == [] and types == set(PROFILES)


def test_every_argument_and_block_may_be_unknown_or_null_while_terraform_validates(table: TemplateDir) -> None:
    use_cases(table, all_cases())

    result = json.loads(table.run("validate", "-json").stdout)

    assert result["valid"], json.dumps(result["diagnostics"], indent=1)[:4000]
    assert result["error_count"] == 0


def test_every_argument_and_block_may_be_unknown_while_terraform_plans(table: TemplateDir) -> None:
    cases = [case for case in all_cases() if case.kind in PLANNED]
    use_cases(table, cases)

    plan = table.plan()

    changes = {change["address"]: change for change in plan["resource_changes"]}
    for case in cases:
        kind, type_name = case.address.split(".")
        prefix = "data." if kind == "data" else ""
        late, early = (f"module.{module}.{prefix}{type_name}.{case.label}" for module in ("late", "early"))
        if case.kind != Kind.KNOWN:
            # Still unknown: a resource is planned for creation with the value unknown, a data source is read once
            # its configuration is known.
            change = changes[late]["change"]
            assert change["actions"] == (["read"] if prefix else ["create"]), late
            assert prefix or unknown_at(change["after_unknown"], case.path), (late, change["after_unknown"])
        # Known when planned: a data source was read, a resource is planned, with the values of the profile.
        values = module_values(plan, early) if prefix else changes[early]["change"]["after"]
        assert contains(values, once_known(case)), (early, values)


def unknown_at(after_unknown: Any, path: tuple[str | int, ...]) -> bool:
    """Whether a plan's `after_unknown` marks the value at `path` (or a whole value around it) unknown."""
    for step in path:
        if after_unknown is True:
            return True
        if isinstance(after_unknown, dict) and isinstance(step, str):
            after_unknown = after_unknown.get(step, False)
        elif isinstance(after_unknown, list) and isinstance(step, int) and step < len(after_unknown):
            after_unknown = after_unknown[step]
        else:
            return False
    return after_unknown is True or (isinstance(after_unknown, dict) and any(after_unknown.values()))


def once_known(case: Case) -> dict[str, Any]:
    """The profile as the case's configuration reads once known: a dynamic block makes one instance."""
    values = json.loads(json.dumps(PROFILES[case.address][case.profile]))
    if case.kind == Kind.BLOCKS:
        *parents, name = case.path
        owner = values
        for step in parents:
            owner = owner[step]
        owner[name] = owner[name][:1]
    return dict(values)


def contains(actual: Any, expected: Any) -> bool:
    """Whether `actual` has every value of `expected` (Terraform adds defaults and computed values)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(contains(actual.get(k), v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(contains, actual, expected))
    return bool(actual == expected)


def module_values(plan: Mapping[str, Any], address: str) -> dict[str, Any]:
    """A data source read during the plan, from the plan's prior state."""
    for module in plan["prior_state"]["values"]["root_module"].get("child_modules", []):
        for resource in module["resources"]:
            if resource["address"] == address:
                return dict(resource["values"])
    raise KeyError(address)


REGION_MODULE = """
variable "exclude" {
  type    = list(string)
  default = []
}
variable "default" {
  type    = string
  default = ""
}
variable "slug" {
  type    = string
  default = "region"
}
locals {
  regions = {
    "eu-west-1" = { name = "Europe (Ireland)", icon = "/emojis/1f1ea-1f1fa.png" }
    "us-east-1" = { name = "US East (N. Virginia)", icon = "/emojis/1f1fa-1f1f8.png" }
  }
}
data "coder_parameter" "region" {
  name    = "region"
  default = var.default == "" ? null : var.default
  order   = null
  dynamic "option" {
    for_each = { for k, v in local.regions : k => v if !(contains(var.exclude, k)) }
    content {
      name  = option.value.name
      icon  = option.value.icon
      value = option.key
    }
  }
}
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "amd64"
}
resource "coder_app" "region" {
  agent_id = coder_agent.dev.id
  slug     = var.slug
  url      = "http://localhost:8080"
}
output "value" {
  value = data.coder_parameter.region.value
}
"""
REGION_TEMPLATE = """
module "region" {
  source  = "./region"
  default = "us-east-1"
  exclude = ["ap-south-1"]
  slug    = "%s"
}
output "region" {
  value = module.region.value
}
"""


@pytest.fixture
def region_template(tmp_path: Path, terraform: TerraformBinary, coder_cli_config: Path) -> Callable[[str], TemplateDir]:
    """A template whose region picker is a module of its own, so that Terraform validates it with unknowns."""

    def make(slug: str) -> TemplateDir:
        (tmp_path / "region").mkdir()
        (tmp_path / "region" / "main.tf").write_text(REQUIRED_PROVIDERS + REGION_MODULE)
        (tmp_path / "main.tf").write_text(REQUIRED_PROVIDERS + REGION_TEMPLATE % slug)
        return TemplateDir(terraform, tmp_path, coder_cli_config).init()

    return make


def test_a_region_picker_module_validates_with_its_options_unknown_and_applies(
    region_template: Callable[[str], TemplateDir],
) -> None:
    """Issue 36: the registry's region pickers (a module whose `option` blocks come from a `dynamic` over a
    filtered map) failed validation with "'_Unknown' object is not iterable"."""
    state = region_template("region").apply()

    assert state["values"]["outputs"]["region"]["value"] == "us-east-1"


def test_a_value_unknown_at_validation_is_still_checked_once_known(
    region_template: Callable[[str], TemplateDir],
) -> None:
    """The module's variables are unknown while Terraform validates, so the slug is checked when it plans."""
    error = region_template("Not_A_Slug").plan_error()

    assert 'invalid "coder_app" slug, must be a valid hostname' in error
    assert "Plugin error" not in error
