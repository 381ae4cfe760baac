"""Prebuilt workspaces end to end, on the shared real server with its real daemons and real Terraform: an
examples/local template whose preset keeps 2 prebuilds; both become ready (agents connected and ready); a
person's create with the preset claims one, which Terraform then builds as theirs (data.coder_workspace_owner is
the person) while the workspace's process runs on: its agent is handed a new token on its control connection and
reconnects with it, and the old token is refused; the pool refills."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from protocol.agentapi import API_PREFIX, TOKEN_HEADER
from tests.support.deployment import EXAMPLE, Deployment, shared_deployment
from tests.support.waiting import wait_until

PRESET = """
data "coder_workspace_preset" "quick" {
  name = "Quick"
  parameters = {
    greeting = "prebuilt"
  }
  prebuilds {
    instances = 2
  }
}

# The agent's first token, for the test to try once the workspace is claimed (written when the directory is made).
resource "terraform_data" "first_token" {
  provisioner "local-exec" {
    environment = {
      TOKEN = coder_agent.main.token
    }
    command = "printf %s $TOKEN > '${local.dir}/first-token'"
  }
}
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    deployment = shared_deployment(tmp_path_factory)
    directory = Path(tmp_path_factory.mktemp("prebuilt-template"))
    (directory / "main.tf").write_text((EXAMPLE / "main.tf").read_text() + PRESET)
    pushed = deployment.cli(
        "alice", "templates", "push", "prebuilt", "-d", str(directory),
        "--variable", f"workspaces_root={deployment.workspaces_root}",
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    return deployment


def _prebuilds(deployment: Deployment) -> list[dict[str, Any]]:
    with deployment.api("alice") as api:
        found = api.get("/workspaces", params={"q": "owner:prebuilds template:prebuilt"}).json()
    return list(found)


def _ready(workspace: dict[str, Any]) -> bool:
    build = workspace["latest_build"]
    agents = [agent for resource in build["resources"] for agent in resource["agents"]]
    return (
        build["transition"] == "start"
        and build["job"]["status"] == "succeeded"
        and bool(agents)
        and all(agent["status"] == "connected" and agent["lifecycle_state"] == "ready" for agent in agents)
    )


def test_a_pool_of_two_is_claimed_by_a_create_and_refills(deployment: Deployment) -> None:
    wait_until(lambda: len([w for w in _prebuilds(deployment) if _ready(w)]) == 2, 90, "2 ready prebuilds")
    pool = {w["id"]: w for w in _prebuilds(deployment)}
    homes = {w["id"]: deployment.workspaces_root / "prebuilds" / w["name"] for w in pool.values()}
    assert all(home.is_dir() for home in homes.values())
    processes = {key: (home / "workspace.pid").read_text() for key, home in homes.items()}
    with deployment.api("carol") as api:
        template = api.get("/templates", params={"q": "exact_name:prebuilt"}).json()[0]
        presets = api.get(f"/templateversions/{template['active_version_id']}/presets").json()
        body = {"template_id": template["id"], "name": "claimed", "template_version_preset_id": presets[0]["ID"]}
        created = api.post("/workspaces", json=body)
    assert created.status_code == 201, created.text
    mine = created.json()
    assert mine["id"] in pool and mine["owner_name"] == "carol"
    home = homes[mine["id"]]
    old_agent = next(a for r in pool[mine["id"]]["latest_build"]["resources"] for a in r["agents"])
    wait_until(lambda: _ready(deployment.workspace("carol", "claimed")), 60, "the claimed workspace ready")
    claimed = deployment.workspace("carol", "claimed")
    new_agent = deployment.agent("carol", "claimed")
    # Terraform built it as carol's (the example's `owner` metadata is data.coder_workspace_owner's name) without
    # replacing the workspace's process: the running agent took the new agent's token and reports as it.
    metadata = {item["key"]: item["value"] for r in claimed["latest_build"]["resources"] for item in r["metadata"]}
    assert metadata["owner"] == "carol"
    assert new_agent["id"] != old_agent["id"]
    assert (home / "workspace.pid").read_text() == processes[mine["id"]]
    assert (home / "greeting").read_text().strip() == "prebuilt"
    assert "handed this agent a new token" in (home / ".slipway-agent" / "slipway-agent.log").read_text()
    # The old token is refused from now on.
    old_token = (home / "first-token").read_text()
    refused = httpx.get(f"{deployment.url}{API_PREFIX}/manifest", headers={TOKEN_HEADER: old_token})
    assert refused.status_code == 401, refused.text
    # The pool refills: two ready prebuilds again, one of them new.
    wait_until(lambda: len([w for w in _prebuilds(deployment) if _ready(w)]) == 2, 90, "the pool refilled")
    assert len({w["id"] for w in _prebuilds(deployment)} - set(pool)) == 1
    # The CLI: status names the pool; pause and resume say what they did.
    status = deployment.cli("bob", "prebuilds", "status")
    assert status.returncode == 0, status.stderr
    assert (
        "Reconciliation is running." in status.stdout and "Quick: 2 ready, 2 running, 0 building of 2" in status.stdout
    )
    paused = deployment.cli("bob", "prebuilds", "pause")
    assert paused.returncode == 0 and "Reconciliation is paused." in paused.stdout
    resumed = deployment.cli("bob", "prebuilds", "resume")
    assert resumed.returncode == 0 and "Reconciliation is running." in resumed.stdout
    refused = deployment.cli("carol", "prebuilds", "pause")
    assert refused.returncode != 0
