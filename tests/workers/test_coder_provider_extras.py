"""Coder's newer resources and data sources (tasks, external agents, Dev Containers, secrets, presets) under real
Terraform, with the error texts of Coder's own provider tests (provider/*_test.go)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.workers.conftest import TemplateDir, resource_values

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
