"""workers.resources on real plans and states of templates that use Slipway's coder provider."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable

import pytest

from protocol.parameters import ParameterOption
from protocol.provisionerd import NameValue, PrebuildSchedule, PrebuildScheduling, Preset
from protocol.resources import AgentMetadata, DisplayApps, Healthcheck, Resource
from tests.workers.conftest import TemplateDir
from workers.resources import ParseError, mark_lifecycles, parse_prebuild_scheduling, parse_show_json

Template = Callable[..., TemplateDir]

WORKSPACE = """
data "coder_workspace" "me" {}

data "coder_parameter" "size" {
  name    = "size"
  type    = "number"
  default = 10
  order   = 2
  validation {
    min = 5
    max = 50
  }
}

data "coder_parameter" "image" {
  name         = "image"
  display_name = "Image"
  order        = 1
  option {
    name  = "Ubuntu"
    value = "ubuntu"
    icon  = "/icon/ubuntu.svg"
  }
  option {
    name  = "Debian"
    value = "debian"
  }
}

resource "coder_agent" "main" {
  count          = data.coder_workspace.me.start_count
  os             = "linux"
  arch           = "amd64"
  startup_script = "echo hi"
  env            = { A = "1" }
  metadata {
    key      = "cpu"
    script   = "top -bn1"
    interval = 5
  }
  display_apps {
    vscode      = false
    ssh_helper  = false
  }
}

# Referenced by two resources: it belongs to the one with the smallest address.
resource "coder_agent" "Sidecar" {
  os   = "linux"
  arch = "arm64"
}

resource "coder_app" "code" {
  count    = data.coder_workspace.me.start_count
  agent_id = coder_agent.main[0].id
  slug     = "code-server"
  url      = "http://localhost:8080"
  healthcheck {
    url       = "http://localhost:8080/healthz"
    interval  = 5
    threshold = 6
  }
}

resource "coder_script" "dotfiles" {
  count        = data.coder_workspace.me.start_count
  agent_id     = coder_agent.main[0].id
  display_name = "Dotfiles"
  script       = "make dotfiles"
  run_on_start = true
}

resource "coder_env" "editor" {
  count    = data.coder_workspace.me.start_count
  agent_id = coder_agent.main[0].id
  name     = "EDITOR"
  value    = "vim"
}

resource "terraform_data" "home" {
  count = 2
}

resource "terraform_data" "container" {
  count = data.coder_workspace.me.start_count
  input = coder_agent.main[0].init_script
}

# Depends on the agent only through the container: farther away, so the agent is not its even though its
# address sorts first.
resource "terraform_data" "backup" {
  count = data.coder_workspace.me.start_count
  input = terraform_data.container[0].id
}

resource "terraform_data" "sidecar_b" {
  for_each = toset(["eu"])
  input    = coder_agent.Sidecar.token
}

resource "terraform_data" "sidecar_a" {
  input = coder_agent.Sidecar.token
}

resource "coder_metadata" "container" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.container[0].id
  daily_cost  = 7
  icon        = "/icon/docker.svg"
  item {
    key   = "image"
    value = data.coder_parameter.image.value
  }
  item {
    key       = "password"
    value     = "hunter2"
    sensitive = true
  }
  item {
    key = "unset"
  }
}
"""


def image_env(value: str) -> dict[str, str]:
    return {"CODER_PARAMETER_" + hashlib.sha256(b"image").hexdigest(): value}


def by_address(resources: list[Resource]) -> dict[str, Resource]:
    return {resource.address: resource for resource in resources}


def check_workspace(resources: dict[str, Resource]) -> None:
    """What a start plan and the state after starting agree on."""
    assert set(resources) == {
        "terraform_data.container[0]",
        "terraform_data.home[0]",
        "terraform_data.home[1]",
        "terraform_data.backup[0]",
        'terraform_data.sidecar_b["eu"]',
        "terraform_data.sidecar_a",
    }
    container = resources["terraform_data.container[0]"]
    assert (container.kind, container.index_key, [agent.name for agent in container.agents]) == (
        "computational",
        "0",
        ["main"],
    )
    assert resources["terraform_data.backup[0]"].kind == "peripheral"
    assert resources["terraform_data.home[1]"].index_key == "1"
    assert resources['terraform_data.sidecar_b["eu"]'].index_key == "eu"
    assert [agent.name for agent in resources["terraform_data.sidecar_a"].agents] == ["Sidecar"]
    assert resources['terraform_data.sidecar_b["eu"]'].agents == ()

    agent = container.agents[0]
    assert (agent.os, agent.arch, agent.startup_script, agent.env) == ("linux", "amd64", "echo hi", {"A": "1"})
    assert agent.connection_timeout == 120
    assert agent.metadata == (AgentMetadata(key="cpu", script="top -bn1", interval=5),)
    assert agent.display_apps == DisplayApps(vscode=False, ssh_helper=False)
    assert [(app.slug, app.display_name, app.share) for app in agent.apps] == [("code-server", "code-server", "owner")]
    assert agent.apps[0].healthcheck == Healthcheck(url="http://localhost:8080/healthz", interval=5, threshold=6)
    assert [(script.display_name, script.run_on_start) for script in agent.scripts] == [("Dotfiles", True)]
    assert [(env.name, env.value) for env in agent.envs] == [("EDITOR", "vim")]

    assert (container.daily_cost, container.icon, container.hide) == (7, "/icon/docker.svg", False)
    assert [(item.key, item.value, item.sensitive) for item in container.metadata] == [
        ("image", "debian", False),
        ("password", "hunter2", True),
    ]


def test_start_plan_attaches_agents_apps_and_metadata(template: Template) -> None:
    parsed = parse_show_json(template(WORKSPACE).plan(image_env("debian")))

    check_workspace(by_address(parsed.resources))
    # Planned agents have no identity yet: Terraform knows it only after apply.
    assert by_address(parsed.resources)["terraform_data.container[0]"].agents[0].token == ""


def test_state_after_apply_attaches_by_id_and_carries_agent_identity(template: Template) -> None:
    state = template(WORKSPACE).apply(image_env("debian"))

    resources = by_address(parse_show_json(state).resources)

    check_workspace(resources)
    agent = resources["terraform_data.container[0]"].agents[0]
    assert agent.id and agent.token and agent.token != agent.id
    assert all(app.id for app in agent.apps)


def test_parameters_are_ordered_with_options_and_validation(template: Template) -> None:
    parsed = parse_show_json(template(WORKSPACE).plan(image_env("ubuntu")))

    image, size = parsed.parameters
    assert (image.name, image.display_name, image.required, image.value) == ("image", "Image", True, "ubuntu")
    assert image.options == (
        ParameterOption(name="Ubuntu", value="ubuntu", icon="/icon/ubuntu.svg"),
        ParameterOption(name="Debian", value="debian"),
    )
    assert (size.type, size.required, size.default_value, size.value) == ("number", False, "10", "10")
    assert (size.validation_min, size.validation_max, size.validation_regex) == (5, 50, "")
    assert (size.mutable, size.ephemeral, size.order) == (False, False, 2)


def test_lifecycles_persistent_when_the_stop_plan_keeps_a_resource(template: Template) -> None:
    workspace = template(WORKSPACE)
    start = parse_show_json(workspace.plan({**image_env("debian"), "CODER_WORKSPACE_TRANSITION": "start"}))
    stop = parse_show_json(workspace.plan({**image_env("debian"), "CODER_WORKSPACE_TRANSITION": "stop"}))

    marked = {resource.address: resource.lifecycle for resource in mark_lifecycles(start.resources, stop.resources)}

    assert marked == {
        "terraform_data.container[0]": "ephemeral",
        "terraform_data.backup[0]": "ephemeral",
        "terraform_data.home[0]": "persistent",
        "terraform_data.home[1]": "persistent",
        'terraform_data.sidecar_b["eu"]': "persistent",
        "terraform_data.sidecar_a": "persistent",
    }
    assert all(resource.agents == () for resource in stop.resources if resource.name != "sidecar_a")


def test_what_the_daemon_sends_reads_back_the_same(template: Template) -> None:
    parsed = parse_show_json(template(WORKSPACE).plan(image_env("debian")))

    assert [Resource.loads(resource.dumps()) for resource in parsed.resources] == parsed.resources
    assert [parameter.name for parameter in parsed.parameters] == ["image", "size"]
    container = next(r for r in parsed.resources if r.address == "terraform_data.container[0]")
    assert json.loads(container.dumps())["agents"][0]["apps"][0]["slug"] == "code-server"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param(
            'resource "coder_agent" "dev_box" {\n  os = "linux"\n  arch = "amd64"\n}\n',
            "agent name 'dev_box' is invalid",
            id="underscore-in-agent-name",
        ),
        pytest.param(
            'resource "coder_agent" "Dev" {\n  os = "linux"\n  arch = "amd64"\n}\n'
            'resource "coder_agent" "dev" {\n  os = "linux"\n  arch = "amd64"\n}\n',
            "duplicate agent name 'dev' (names must be unique ignoring case)",
            id="agent-names-equal-ignoring-case",
        ),
        pytest.param(
            'resource "coder_agent" "dev" {\n  count = 2\n  os = "linux"\n  arch = "amd64"\n}\n',
            "duplicate agent name 'dev'",
            id="agent-with-count-2",
        ),
        pytest.param(
            'data "coder_parameter" "a" {\n  name = "region"\n}\ndata "coder_parameter" "b" {\n  name = "region"\n}\n',
            "duplicate parameter name 'region'",
            id="parameter-names",
        ),
    ],
)
def test_templates_breaking_coders_naming_rules_are_refused(template: Template, source: str, message: str) -> None:
    plan = template(source).plan()

    with pytest.raises(ParseError) as caught:
        parse_show_json(plan)

    assert message in str(caught.value)


def test_agent_used_only_by_a_provisioner_attaches_to_that_resource(template: Callable[[str], TemplateDir]) -> None:
    directory = template(
        """
resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
}
resource "terraform_data" "unrelated" {}
resource "terraform_data" "host" {
  provisioner "local-exec" {
    command     = "true"
    environment = { INIT = coder_agent.main.init_script }
  }
}
"""
    )
    for document in (directory.plan(), directory.apply()):
        resources = {resource.name: resource for resource in parse_show_json(document).resources}
        assert [agent.name for agent in resources["host"].agents] == ["main"]
        assert resources["host"].kind == "computational" and resources["unrelated"].kind == "peripheral"


PRESETS = """
data "coder_parameter" "region" {
  name    = "region"
  default = "eu"
}

data "coder_parameter" "size" {
  name    = "size"
  type    = "number"
  default = 2
}

data "coder_workspace_preset" "big" {
  name        = "Big in Europe"
  description = "Four cores near Berlin"
  icon        = "/icon/eu.svg"
  default     = true
  parameters = {
    (data.coder_parameter.region.name) = "eu"
    size                               = 4
  }
  prebuilds {
    instances = 3
    expiration_policy {
      ttl = 86400
    }
    scheduling {
      timezone = "Europe/Berlin"
      schedule {
        cron      = "* 8-18 * * 1-5"
        instances = 5
      }
    }
  }
}

data "coder_workspace_preset" "plain" {
  name = "Plain"
}
"""


def test_presets_are_read_with_their_values_and_prebuilds(template: Template) -> None:
    parsed = parse_show_json(template(PRESETS).plan())

    assert parsed.presets == [
        Preset(
            name="Big in Europe",
            parameters=(NameValue(name="region", value="eu"), NameValue(name="size", value="4")),
            default=True,
            description="Four cores near Berlin",
            icon="/icon/eu.svg",
            desired_prebuild_instances=3,
            prebuild_ttl_seconds=86400,
            prebuild_scheduling=PrebuildScheduling(
                timezone="Europe/Berlin", schedules=(PrebuildSchedule(cron="* 8-18 * * 1-5", instances=5),)
            ),
        ),
        Preset(name="Plain"),
    ]


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [
        ({"timezone": "Mars/Olympus", "schedule": []}, "unknown time zone Mars/Olympus"),
        ({"timezone": "UTC", "schedule": [{"cron": "0 8 * * *", "instances": 1}]}, "minute field should be *"),
        ({"timezone": "UTC", "schedule": [{"cron": "* 25 * * *", "instances": 1}]}, "above maximum (23)"),
        (
            {
                "timezone": "UTC",
                "schedule": [{"cron": "* 8-18 * * *", "instances": 1}, {"cron": "* 9 * * 1", "instances": 2}],
            },
            "schedules overlap",
        ),
        ({"timezone": "UTC", "schedule": [{"cron": "* 8 * * *", "instances": -1}]}, "at least 0"),
    ],
)
def test_a_preset_schedule_that_cannot_be_read_fails_the_import(scheduling: dict[str, object], message: str) -> None:
    # What another provider's state may hold (ours refuses these at plan time: test_coder_provider_extras.py).
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_prebuild_scheduling("data.coder_workspace_preset.big", {"scheduling": [scheduling]})


TASK_AND_DEVCONTAINER = """
resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
}

resource "coder_app" "claude" {
  agent_id = coder_agent.main.id
  slug     = "claude"
  url      = "http://localhost:3284"
}

resource "coder_app" "web" {
  agent_id = coder_agent.main.id
  slug     = "web"
  url      = "http://localhost:8080"
}

resource "coder_ai_task" "task" {
  app_id = coder_app.claude.id
}

resource "coder_devcontainer" "project" {
  agent_id         = coder_agent.main.id
  workspace_folder = "/workspaces/project"
  config_path      = ".devcontainer/devcontainer.json"
}

resource "terraform_data" "box" {
  input = coder_agent.main.id
}
"""


def test_dev_containers_join_their_agent_and_the_ai_task_marks_its_app(template: Template) -> None:
    workspace = template(TASK_AND_DEVCONTAINER)
    planned = by_address(parse_show_json(workspace.plan()).resources)["terraform_data.box"].agents[0]
    assert [(item.workspace_folder, item.config_path) for item in planned.devcontainers] == [
        ("/workspaces/project", ".devcontainer/devcontainer.json")
    ]
    assert not any(app.ai_task for app in planned.apps)  # the app's id is not known before it is applied

    applied = by_address(parse_show_json(workspace.apply()).resources)["terraform_data.box"].agents[0]
    assert [(app.slug, app.ai_task) for app in applied.apps] == [("claude", True), ("web", False)]
    assert [item.workspace_folder for item in applied.devcontainers] == ["/workspaces/project"]
