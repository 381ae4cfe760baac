"""Coder's newer resources and data sources (tasks, external agents, Dev Containers, secrets, presets) under real
Terraform, with the error texts of Coder's own provider tests (provider/*_test.go)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.workers.conftest import TemplateDir, resource_values
from workers.coder_provider.presets import ScheduleError, check_prebuild_cron, schedules_overlap
from workers.resources import parse_show_json
from workers.terraform import parameter_env_name

Template = Callable[..., TemplateDir]
TASK_ID = "7d8d4c2e-fb57-44f9-a183-22509819c2e7"

TASKS = """
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "amd64"
}
resource "coder_app" "chat" {
  agent_id = coder_agent.dev.id
  slug     = "chat"
}
resource "coder_ai_task" "task" {
  app_id = coder_app.chat.id
}
resource "coder_ai_task" "old_style" {
  sidebar_app {
    id = coder_app.chat.id
  }
}
data "coder_task" "me" {}
resource "coder_external_agent" "outside" {
  agent_id = coder_agent.dev.id
}
resource "coder_devcontainer" "repo" {
  agent_id         = coder_agent.dev.id
  workspace_folder = "/home/coder/repo"
}
"""


@pytest.fixture
def tasks(template: Template) -> TemplateDir:
    return template(TASKS)


def test_a_task_build_reports_its_task_and_prompt(tasks: TemplateDir) -> None:
    state = tasks.apply({"CODER_TASK_ID": TASK_ID, "CODER_TASK_PROMPT": "fix the tests"})

    app_id = resource_values(state, "coder_app.chat")["id"]
    task = resource_values(state, "coder_ai_task.task")
    assert (task["id"], task["enabled"], task["prompt"], task["app_id"]) == (TASK_ID, True, "fix the tests", app_id)
    assert resource_values(state, "coder_ai_task.old_style")["app_id"] == app_id  # taken from sidebar_app
    data = resource_values(state, "data.coder_task.me")
    assert (data["id"], data["enabled"], data["prompt"]) == (TASK_ID, True, "fix the tests")
    # Along for the ride: the other agent-side resources of this module generation.
    assert (
        resource_values(state, "coder_external_agent.outside")["agent_id"]
        == resource_values(state, "coder_agent.dev")["id"]
    )
    container = resource_values(state, "coder_devcontainer.repo")
    assert uuid.UUID(container["subagent_id"]) and container["config_path"] is None
    rerun = tasks.run("plan", "-input=false", "-detailed-exitcode", env={"CODER_TASK_ID": TASK_ID})
    assert rerun.returncode == 0, rerun.stdout  # nothing planned to change, sidebar_app set included


def test_a_workspace_build_is_not_a_task(tasks: TemplateDir) -> None:
    state = tasks.apply()

    task = resource_values(state, "coder_ai_task.task")
    assert (task["enabled"], task["prompt"]) == (False, "")
    assert uuid.UUID(task["id"])
    data = resource_values(state, "data.coder_task.me")
    assert (data["enabled"], data["prompt"]) == (False, "")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param(
            'resource "coder_ai_task" "t" {\n  app_id = "not-a-uuid"\n}', 'expected "app_id" to be a valid UUID'
        ),
        pytest.param(
            f'resource "coder_ai_task" "t" {{\n  app_id = "{TASK_ID}"\n'
            f'  sidebar_app {{\n    id = "{TASK_ID}"\n  }}\n}}',
            '"app_id": conflicts with sidebar_app',
        ),
        pytest.param(
            'resource "coder_devcontainer" "d" {\n  agent_id = "a"\n}',
            'The argument "workspace_folder" is required, but no definition was found.',
        ),
        pytest.param(
            'resource "coder_devcontainer" "d" {\n  agent_id = "a"\n  workspace_folder = ""\n}',
            'expected "workspace_folder" to not be an empty string',
        ),
        pytest.param(
            'resource "coder_external_agent" "e" {}',
            'The argument "agent_id" is required, but no definition was found.',
        ),
    ],
)
def test_invalid_task_and_agent_resources_fail_the_plan(template: Template, source: str, message: str) -> None:
    assert message in template(source).plan_error()


def test_a_task_without_an_app_fails_at_apply(template: Template) -> None:
    workspace = template('resource "coder_ai_task" "t" {}')

    result = workspace.run("apply", "-input=false", "-auto-approve")

    assert result.returncode != 0
    assert "'app_id' must be set" in result.stdout + result.stderr


def test_an_invalid_task_id_fails_the_task_data_source(template: Template) -> None:
    assert "invalid UUID" in template('data "coder_task" "me" {}').plan_error({"CODER_TASK_ID": "not a valid UUID"})


SECRETS = """
data "coder_secret" "token" {
  env          = "MY_TOKEN"
  help_message = "Add MY_TOKEN under Secrets"
}
data "coder_secret" "key" {
  file         = "~/.ssh/id_rsa"
  help_message = "Add your SSH key"
}
"""
START_BUILD = {"CODER_WORKSPACE_BUILD_ID": "build-1", "CODER_WORKSPACE_TRANSITION": "start"}


@pytest.fixture
def secrets(template: Template) -> TemplateDir:
    return template(SECRETS)


def test_secrets_come_from_the_provisioners_variables(secrets: TemplateDir) -> None:
    env = {
        **START_BUILD,
        "CODER_SECRET_ENV_MY_TOKEN": "token-value",
        "CODER_SECRET_FILE_" + b"~/.ssh/id_rsa".hex(): "key-contents",
    }

    plan = secrets.plan(env)

    token = resource_values(plan, "data.coder_secret.token")
    assert (token["id"], token["value"]) == ("env:MY_TOKEN", "token-value")
    key = resource_values(plan, "data.coder_secret.key")
    assert (key["id"], key["value"]) == ("file:~/.ssh/id_rsa", "key-contents")


def test_an_import_reports_the_secrets_a_template_declares(template: Template) -> None:
    """What the server hands a build is these and no more of the owner's secrets (app/usersecrets)."""
    declared = template(SECRETS + 'data "coder_secret" "again" {\n  env = "MY_TOKEN"\n  help_message = "x"\n}\n')
    assert [(item.env, item.file) for item in parse_show_json(declared.plan()).secrets] == [
        ("", "~/.ssh/id_rsa"),
        ("MY_TOKEN", ""),
    ]


def test_a_missing_secret_fails_only_a_start_build(secrets: TemplateDir) -> None:
    # Stopping, or planning outside a build (a template import), must not need the user's secrets.
    stopped = secrets.plan({**START_BUILD, "CODER_WORKSPACE_TRANSITION": "stop"})
    assert resource_values(stopped, "data.coder_secret.token")["value"] == ""
    assert resource_values(secrets.plan(), "data.coder_secret.key")["value"] == ""

    output = secrets.plan_error({**START_BUILD, "CODER_SECRET_FILE_" + b"~/.ssh/id_rsa".hex(): "key"})

    assert 'Missing required secret: environment variable "MY_TOKEN"' in output
    assert 'Required: environment variable "MY_TOKEN" Help message: Add MY_TOKEN under Secrets' in output
    assert 'To resolve: ensure a secret exposes the environment variable "MY_TOKEN".' in output


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ('env = "MY-TOKEN"', '`env` must be a POSIX-compliant identifier matching "^[a-zA-Z_][a-zA-Z0-9_]*$"'),
        ('file = "secret.txt"', '`file` must start with `/` or `~/`; got "secret.txt"'),
        ('env = "A"\n  file = "/a"', "exactly one of `env` or `file` must be set"),
        ("", "exactly one of `env` or `file` must be set"),
    ],
)
def test_invalid_secret_declarations_fail_the_plan(template: Template, settings: str, message: str) -> None:
    source = f'data "coder_secret" "s" {{\n  {settings}\n  help_message = "help"\n}}'

    assert message in template(source).plan_error()


PRESET = """
data "coder_workspace_preset" "large" {{
  name        = "large"
  description = "Eight CPUs"
  icon        = "/icon/region.svg"
  parameters  = {{ cpus = "8", region = "eu" }}
  {settings}
}}
"""
PREBUILDS = """prebuilds {{
    instances = 2
    expiration_policy {{
      ttl = {ttl}
    }}
    scheduling {{
      timezone = "{timezone}"
      schedule {{
        cron      = "{first}"
        instances = 3
      }}
      schedule {{
        cron      = "{second}"
        instances = 1
      }}
    }}
  }}"""


def prebuilds(
    *, ttl: int = 86400, timezone: str = "Europe/Berlin", first: str = "* 8-18 * * 1-5", second: str = "* 8-18 * * 6"
) -> str:
    return PREBUILDS.format(ttl=ttl, timezone=timezone, first=first, second=second)


def test_a_preset_lists_its_parameters_and_prebuild_schedule(template: Template) -> None:
    plan = template(PRESET.format(settings=prebuilds())).plan()

    preset = resource_values(plan, "data.coder_workspace_preset.large")
    assert (preset["id"], preset["default"], preset["parameters"]) == ("large", False, {"cpus": "8", "region": "eu"})
    prebuild = preset["prebuilds"][0]
    assert (prebuild["instances"], prebuild["expiration_policy"]) == (2, [{"ttl": 86400}])
    scheduling = prebuild["scheduling"][0]
    assert scheduling["timezone"] == "Europe/Berlin"
    assert [(s["cron"], s["instances"]) for s in scheduling["schedule"]] == [("* 8-18 * * 1-5", 3), ("* 8-18 * * 6", 1)]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(prebuilds(ttl=1800), "must be 0 or between 3600 and 31536000, got 1800", id="ttl"),
        pytest.param(
            prebuilds(timezone="InvalidLocation"),
            'failed to load timezone "InvalidLocation": unknown time zone InvalidLocation',
            id="timezone",
        ),
        pytest.param(
            prebuilds(first="0 8-18 * * 1-5"), "cron spec failed validation: minute field should be *", id="minute"
        ),
        pytest.param(
            prebuilds(first="* 25-26 * * 1-5"),
            "failed to parse cron spec: end of range (26) above maximum (23): 25-26",
            id="hour-range",
        ),
        pytest.param(
            prebuilds(second="* 18-19 * * 5-6"),
            "schedules overlap with each other: schedules overlap: * 8-18 * * 1-5 and * 18-19 * * 5-6",
            id="overlap",
        ),
    ],
)
def test_invalid_prebuilds_fail_the_plan(template: Template, settings: str, message: str) -> None:
    assert message in template(PRESET.format(settings=settings)).plan_error()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('name = ""', 'expected "name" to not be an empty string'),
        (
            'name = "p"\n  description = "' + "d" * 129 + '"',
            "expected length of description to be in the range (0 - 128)",
        ),
        ('name = "p"\n  icon = "/icon/%zz.svg"', "invalid URL escape"),
    ],
)
def test_invalid_preset_attributes_fail_the_plan(template: Template, source: str, message: str) -> None:
    assert message in template(f'data "coder_workspace_preset" "p" {{\n  {source}\n}}').plan_error()


def test_display_apps_and_metadata_items_take_coders_defaults(template: Template) -> None:
    workspace = template(
        """
resource "coder_agent" "dev" {
  os   = "linux"
  arch = "amd64"
  display_apps {
    vscode = false
  }
}
resource "coder_metadata" "info" {
  resource_id = coder_agent.dev.id
  item {
    key   = "region"
    value = "eu"
  }
}
"""
    )

    state = workspace.apply()

    assert resource_values(state, "coder_agent.dev")["display_apps"] == [
        {"vscode": False, "vscode_insiders": False, "web_terminal": True, "ssh_helper": True,
         "port_forwarding_helper": True}
    ]  # fmt: skip
    assert resource_values(state, "coder_metadata.info")["item"][0]["sensitive"] is False
    # Defaults filled in at plan time leave nothing to change on the next plan.
    assert workspace.run("plan", "-input=false", "-detailed-exitcode").returncode == 0


# Cases of Coder's helpers/schedule_validation_test.go (TestSchedulesOverlap): plain functions, no Terraform needed.
@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        ("* 9-18 * * 1-5", "* 9-18 * * 1-5", True),
        ("* 9-12 * * 1-5", "* 13-18 * * 1-5", False),
        ("* 9-18 * * 1,3,5", "* 9-18 * * 2,4,6", False),
        ("* 9-18 1 * 1-3", "* 9-18 2 * 4-5", False),  # both days restricted: either one may match
        ("* 9-18 1 * 1,3,5", "* 9-18 1 * 2,4,6", True),
        ("* * * * 1-5", "* 9-18 * * 1-5", True),
        ("* 9-11,13-15 * * 1-5", "* 12,16-18 * * 1-5", False),
        ("* 9-11,13-15 * * 1-5", "* 10-12,14-16 * * 1-5", True),
        ("* 9-18 * 1-6 *", "* 9-18 * 7-12 *", False),
    ],
)
def test_prebuild_schedules_overlap_as_coder_computes_it(first: str, second: str, overlap: bool) -> None:
    assert schedules_overlap(first, second) is overlap


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ("* 25-26 * * 1-5", "* 9-18 * * 1-5", "invalid hour range"),
        ("* 9-18 * 13 1-5", "* 9-18 * * 1-5", "invalid month range"),
        ("* 9-18 * *", "* 9-18 * * 1-5", "has 4 fields, expected 5 fields"),
        ("* 9-18 * * MON", "* 9-18 * * 1-5", 'invalid day range: invalid value: strconv.Atoi: parsing "MON"'),
    ],
)
def test_unreadable_schedules_are_named_in_the_overlap_check(first: str, second: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        schedules_overlap(first, second)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("* 8-18 * * MON-FRI", ""),
        ("* */2 * jan-mar *", ""),
        ("* 8 * * 7", "failed to parse cron spec: end of range (7) above maximum (6): 7"),
        ("* 9-8 * * *", "failed to parse cron spec: beginning of range (9) beyond end of range (8): 9-8"),
        ("* 1-2-3 * * *", "failed to parse cron spec: too many hyphens: 1-2-3"),
        (
            "* x * * *",
            'failed to parse cron spec: failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax',
        ),
        ("* * * *", "cron spec failed validation: cron specification should consist of 5 fields"),
    ],
)
def test_prebuild_cron_is_read_as_robfig_cron_reads_it(spec: str, message: str) -> None:
    assert check_prebuild_cron(spec) == message


EMPTY_DEFAULTS = """
data "coder_parameter" "branch" {
  name    = "branch"
  default = ""
}
data "coder_parameter" "motd" {
  name    = "motd"
  default = "hello"
}
data "coder_parameter" "token" {
  name = "token"
}
"""


def test_an_empty_default_reads_back_null_yet_the_parameter_stays_optional(template: Template) -> None:
    """Coder's provider keeps `default = ""` out of its state (the registry's dotfiles module tests for the null),
    and Coder's server takes `optional`, not the default, to decide whether a parameter is required."""
    plan = template(EMPTY_DEFAULTS).plan({parameter_env_name("token"): "t0ken"})

    branch, motd, token = (
        resource_values(plan, f"data.coder_parameter.{name}") for name in ("branch", "motd", "token")
    )
    assert (branch["default"], branch["optional"], branch["value"]) == (None, True, "")
    assert (motd["default"], motd["optional"], motd["value"]) == ("hello", True, "hello")
    assert (token["default"], token["optional"], token["value"]) == (None, False, "t0ken")
    read = {parameter.name: parameter for parameter in parse_show_json(plan).parameters}
    assert [(read[name].required, read[name].default_value) for name in ("branch", "motd", "token")] == [
        (False, ""),
        (False, "hello"),
        (True, ""),
    ]
