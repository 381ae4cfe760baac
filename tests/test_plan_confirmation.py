"""Plan, then apply, with persistent data protected: real server, real daemon, real Terraform.

The template's home (`terraform_data`, persistent: it outlives a stop) is replaced when the `disk` parameter
changes, and leaves a mark in a file when it is destroyed. A start that would replace it stops as
`awaiting_confirmation` with the plan shown; cancel destroys nothing, confirm applies exactly that plan; a stop
(which only destroys ephemeral resources) never asks; the template setting turns the check off.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PASSWORD, run_cli
from tests.support.archives import tar_of
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page
from tests.support.daemon_user import daemon_writable_dir
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.provisionerd import wait_job
from tests.support.server import ServerProcess

TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
variable "marks" {
  type = string
}
data "coder_workspace" "me" {}
data "coder_parameter" "disk" {
  name    = "disk"
  type    = "number"
  default = 10
  mutable = true
}
resource "terraform_data" "home" {
  triggers_replace = [data.coder_parameter.disk.value]
  input            = "${var.marks}/${data.coder_workspace.me.name}"
  provisioner "local-exec" {
    when    = destroy
    command = "echo destroyed >> '${self.input}'"
  }
}
resource "terraform_data" "dev" {
  count = data.coder_workspace.me.start_count
}
"""
DONE = ("succeeded", "failed", "canceled", "awaiting_confirmation")


@dataclass
class Deployment:
    api: httpx.Client
    template_id: str
    marks: Path
    cli_env: dict[str, str]
    url: str


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    marks = daemon_writable_dir("plan-marks")
    with ServerProcess(tmp_path_factory.mktemp("plans") / "data", "--provisioner-daemons", "1") as server:
        token = sign_up_owner(server.url, PASSWORD)
        api = api_client(server.url, token)
        cli_env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("cli-config")),
            "SLIPWAY_URL": server.url,
            "SLIPWAY_SESSION_TOKEN": token,
        }
        upload = api.post(
            "/files", content=tar_of({"main.tf": TEMPLATE}), headers={"Content-Type": "application/x-tar"}
        )
        assert upload.status_code == 201, upload.text
        variables = [{"name": "marks", "value": str(marks)}]
        version = api.post(
            "/templateversions", json={"file_id": upload.json()["id"], "user_variable_values": variables}
        )
        assert version.status_code == 201, version.text
        job = wait_job(api, version.json()["job"]["id"], DONE, timeout=180)
        assert job["status"] == "succeeded", job
        template = api.post("/templates", json={"name": "homes", "version_id": version.json()["id"]})
        assert template.status_code == 201, template.text
        yield Deployment(api, template.json()["id"], marks, cli_env, server.url)
        api.close()


def build(deployment: Deployment, workspace_id: str, transition: str, **disk: int) -> dict[str, Any]:
    values = [{"name": "disk", "value": str(value)} for value in disk.values()]
    reply = deployment.api.post(
        f"/workspaces/{workspace_id}/builds", json={"transition": transition, "rich_parameter_values": values}
    )
    assert reply.status_code == 201, reply.text
    return finished(deployment, reply.json())


def finished(deployment: Deployment, build: dict[str, Any]) -> dict[str, Any]:
    wait_job(deployment.api, build["job"]["id"], DONE, timeout=180)
    reply = deployment.api.get(f"/workspacebuilds/{build['id']}")
    return dict(reply.json())


def create(deployment: Deployment, name: str) -> tuple[str, dict[str, Any]]:
    reply = deployment.api.post("/workspaces", json={"template_id": deployment.template_id, "name": name})
    assert reply.status_code == 201, reply.text
    return reply.json()["id"], finished(deployment, reply.json()["latest_build"])


def destroyed(deployment: Deployment, name: str) -> int:
    mark = deployment.marks / name
    return mark.read_text().count("destroyed") if mark.exists() else 0


def test_a_replaced_home_waits_for_confirmation_cancel_keeps_it_confirm_applies_it(deployment: Deployment) -> None:
    api = deployment.api
    workspace_id, first = create(deployment, "alpha")
    assert first["job"]["status"] == "succeeded", first  # creating destroys nothing: no question asked
    stopped = build(deployment, workspace_id, "stop")
    assert stopped["job"]["status"] == "succeeded" and destroyed(deployment, "alpha") == 0  # only dev went

    held = build(deployment, workspace_id, "start", disk=20)
    assert held["job"]["status"] == "awaiting_confirmation" and held["status"] == "awaiting_confirmation", held
    assert api.get(f"/workspaces/{workspace_id}").json()["latest_build"]["status"] == "awaiting_confirmation"
    plan = api.get(f"/workspacebuilds/{held['id']}/plan").json()
    (home,) = plan["destroys"]
    assert home["address"] == "terraform_data.home" and home["persistent"] is True and home["replace"] is True
    assert home["reasons"] == ["triggers_replace"] and "terraform_data.dev[0]" in plan["creates"]
    assert destroyed(deployment, "alpha") == 0
    # Another build cannot start while this one waits.
    assert api.post(f"/workspaces/{workspace_id}/builds", json={"transition": "stop"}).status_code == 409

    canceled = api.patch(f"/workspacebuilds/{held['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["job"]["status"] == "canceled", canceled.text
    assert destroyed(deployment, "alpha") == 0
    again = api.post(f"/workspacebuilds/{held['id']}/confirm")
    assert again.status_code == 400 and "no plan waiting" in again.json()["message"]

    held = build(deployment, workspace_id, "start", disk=20)
    assert held["job"]["status"] == "awaiting_confirmation", held
    confirmed = api.post(f"/workspacebuilds/{held['id']}/confirm")
    assert confirmed.status_code == 200, confirmed.text
    applied = finished(deployment, held)
    assert applied["job"]["status"] == "succeeded", applied
    assert destroyed(deployment, "alpha") == 1  # replaced once: the plan that was shown
    logs = api.get(f"/workspacebuilds/{held['id']}/logs").json()
    assert any("waiting for the workspace's owner" in line["output"] for line in logs)


def test_deletes_never_ask_and_the_template_setting_turns_the_check_off(deployment: Deployment) -> None:
    api = deployment.api
    workspace_id, _ = create(deployment, "beta")
    assert (
        api.patch(f"/templates/{deployment.template_id}", json={"protect_persistent_resources": False}).json()[
            "protect_persistent_resources"
        ]
        is False
    )
    try:
        changed = build(deployment, workspace_id, "start", disk=30)
        assert changed["job"]["status"] == "succeeded" and destroyed(deployment, "beta") == 1, changed
    finally:
        api.patch(f"/templates/{deployment.template_id}", json={"protect_persistent_resources": True})
    deleted = build(deployment, workspace_id, "delete")
    assert deleted["job"]["status"] == "succeeded" and destroyed(deployment, "beta") == 2
    missing = api.get(f"/workspacebuilds/{deleted['id']}/plan")
    assert missing.status_code == 404 and "no plan to review" in missing.json()["message"]


def test_the_cli_shows_the_plan_and_needs_yes_without_a_terminal(deployment: Deployment) -> None:
    api = deployment.api
    workspace_id, _ = create(deployment, "gamma")
    asked = run_cli("start", "gamma", "-p", "disk=20", env=deployment.cli_env, timeout=240)
    assert asked.returncode != 0, asked.stdout
    assert "replace terraform_data.home [persistent] (forced by triggers_replace)" in asked.stdout
    assert "waits for confirmation" in asked.stderr and "--yes" in asked.stderr and "Traceback" not in asked.stderr
    held = api.get(f"/workspaces/{workspace_id}").json()["latest_build"]
    assert held["status"] == "awaiting_confirmation" and destroyed(deployment, "gamma") == 0
    assert api.patch(f"/workspacebuilds/{held['id']}/cancel").status_code == 200

    confirmed = run_cli("start", "gamma", "-p", "disk=20", "--yes", env=deployment.cli_env, timeout=240)
    assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
    assert "This plan destroys persistent resources" in confirmed.stdout and "succeeded" in confirmed.stdout
    # The held plan's log once, then only what the confirmed job logged (init again, and the apply of that plan).
    assert confirmed.stdout.count("waiting for the workspace's owner") == 1
    assert confirmed.stdout.count("==> Setting up") == 2 and "==> Starting workspace" in confirmed.stdout
    assert destroyed(deployment, "gamma") == 1


def test_the_build_page_shows_the_plan_and_confirms_it_in_a_browser(deployment: Deployment) -> None:
    workspace_id, _ = create(deployment, "delta")
    held = build(deployment, workspace_id, "start", disk=20)
    assert held["job"]["status"] == "awaiting_confirmation", held
    with browser_page() as page:
        sign_in_page(page, deployment.url)
        page.goto(f"{deployment.url}/builds/{held['id']}")
        review = page.locator("#plan-review")
        review.wait_for()
        assert "This start would destroy persistent data" in review.inner_text()
        row = review.locator("tbody tr").first
        assert "terraform_data.home" in row.inner_text() and "persistent" in row.inner_text()
        assert "replaced" in row.inner_text() and "triggers_replace" in row.inner_text()
        page.screenshot(path=str(ARTIFACTS / "build-awaiting-confirmation.png"), full_page=True)
        page.click("#confirm-plan")
        page.wait_for_selector("text=Confirmed: the plan is being applied.")
        # The page follows the applying job live (its stream opened after the confirmation) to its end.
        page.wait_for_selector("text=/Succeeded in/", timeout=120_000)
        assert page.locator("#job-status").inner_text().strip() == "succeeded"  # the build's own status
    assert destroyed(deployment, "delta") == 1
