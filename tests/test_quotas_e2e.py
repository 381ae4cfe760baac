"""Quotas and per-person limits against a real server (the shared deployment), its built-in daemons and real
Terraform: a build whose plan's coder_metadata costs more than its owner's budget fails between plan and apply,
with the budget, the use and what costs what, in the build's error and on `slipway create`; with the allowance
raised the same start applies; a template's per-person limit refuses the CLI's next create with its message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.deployment import Deployment, shared_deployment

TEMPLATE = "costly"
COSTLY = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "box" {
  count = data.coder_workspace.me.start_count
}
resource "coder_metadata" "box" {
  count       = data.coder_workspace.me.start_count
  resource_id = terraform_data.box[0].id
  daily_cost  = 10
}
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = shared_deployment(tmp_path_factory)
    deployment.push_template(TEMPLATE, COSTLY)
    yield deployment


@pytest.fixture
def budget(deployment: Deployment) -> Iterator[str]:
    """A group giving carol an allowance of 5: quotas are on while it exists (it is deleted after, so that the
    modules sharing this deployment build without quotas)."""
    with deployment.api("alice") as api:
        body = {"name": "quota-e2e", "quota_allowance": 5}
        made = api.post("/organizations/default/groups", json=body)
        assert made.status_code == 201, made.text
        group = made.json()["id"]
        added = api.patch(f"/groups/{group}", json={"add_users": [carol_id(deployment)]})
        assert added.status_code == 200, added.text
        try:
            yield group
        finally:
            api.delete(f"/groups/{group}")


def carol_id(deployment: Deployment) -> str:
    with deployment.api("carol") as api:
        return str(api.get("/users/me").json()["id"])


def failed_build(deployment: Deployment, name: str) -> dict[str, Any]:
    build = deployment.workspace("carol", name)["latest_build"]
    assert build["job"]["status"] == "failed", build
    return dict(build)


def test_a_start_over_budget_fails_before_apply_and_fits_once_the_allowance_is_raised(
    deployment: Deployment, budget: str
) -> None:
    created = deployment.cli("carol", "create", "dear", "-t", TEMPLATE)
    assert created.returncode != 0, created.stdout
    message = (
        "This build of dear would cost 10 a day and take carol over their quota: budget 5, in use 0 (workspaces: "
        "none). Stop or delete a workspace, or ask an admin for a larger allowance."
    )
    assert message in created.stdout + created.stderr and "Traceback" not in created.stderr
    build = failed_build(deployment, "dear")
    assert build["job"]["error"] == message
    assert build["resources"] == []  # nothing was applied: Terraform's box was never made
    with deployment.api("carol") as api:
        assert api.get("/workspace-quota/me").json() == {"credits_consumed": 0, "budget": 5}
    with deployment.api("alice") as api:
        assert api.patch(f"/groups/{budget}", json={"quota_allowance": 10}).status_code == 200
    started = deployment.cli("carol", "start", "dear")
    assert started.returncode == 0, started.stdout + started.stderr
    with deployment.api("carol") as api:
        assert api.get("/workspace-quota/me").json() == {"credits_consumed": 10, "budget": 10}


def test_the_cli_shows_a_per_person_limit_refusal(deployment: Deployment) -> None:
    with deployment.api("alice") as api:
        [template] = api.get(f"/templates?name={TEMPLATE}").json()
        assert api.patch(f"/templates/{template['id']}", json={"max_workspaces_per_person": 1}).status_code == 200
    made = deployment.cli("dave", "create", "mine", "-t", TEMPLATE)
    assert made.returncode == 0, made.stdout + made.stderr
    refused = deployment.cli("dave", "create", "second", "-t", TEMPLATE)
    assert refused.returncode != 0, refused.stdout
    assert (
        f"dave has 1 workspace of template {TEMPLATE}: it allows at most 1 per person. Delete one to create another."
        in refused.stderr
    ), refused.stderr
    assert "Traceback" not in refused.stderr
