"""Prebuilds never in people's way (issue 42 part 3), on a real server with its 2 real daemons and real Terraform:
with 50 prebuild builds queued (a preset of 50 instances, the per-template cap raised to 50), a person's build
waits at most for the builds the daemons are already running, one per daemon, and then goes before every queued
prebuild. Only the order is asserted, read from the jobs' own timestamps."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.deployment import running_deployment
from tests.support.waiting import wait_until

DAEMONS = 2
POOL = 50
# examples/local's shape, without its agent: a workspace that is a directory made by a local command.
TEMPLATE = f"""
terraform {{
  required_providers {{
    coder = {{
      source = "coder/coder"
    }}
  }}
}}

data "coder_workspace" "me" {{}}
data "coder_workspace_owner" "me" {{}}

resource "terraform_data" "home" {{
  input = "${{data.coder_workspace_owner.me.name}}/${{data.coder_workspace.me.name}}"
}}

data "coder_workspace_preset" "many" {{
  name = "Many"
  prebuilds {{
    instances = {POOL}
  }}
}}
"""


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_fifty_queued_prebuilds_delay_a_persons_build_by_at_most_one_build_per_daemon(tmp_path: Path) -> None:
    env = {"SLIPWAY_PREBUILDS_INTERVAL": "1", "SLIPWAY_PREBUILDS_MAX_IN_FLIGHT": str(POOL)}
    with running_deployment(tmp_path, env=env) as deployment:
        deployment.push_template("many", TEMPLATE)

        def prebuild_jobs() -> list[dict[str, Any]]:
            with deployment.api("alice") as api:
                listed = api.get("/workspaces", params={"q": "owner:prebuilds template:many", "limit": 100}).json()
            return [w["latest_build"]["job"] for w in listed]

        wait_until(lambda: len(prebuild_jobs()) == POOL, 120, f"{POOL} prebuild builds queued")
        with deployment.api("carol") as api:
            template = api.get("/templates", params={"q": "exact_name:many"}).json()[0]
            created = api.post("/workspaces", json={"template_id": template["id"], "name": "mine"})
        assert created.status_code == 201, created.text
        assert created.json()["latest_build"]["job"]["priority"] == "high"

        def my_job() -> dict[str, Any]:
            job: dict[str, Any] = deployment.workspace("carol", "mine")["latest_build"]["job"]
            return job

        wait_until(lambda: my_job()["status"] in ("succeeded", "failed"), 300, "the person's build to finish")
        mine = my_job()
        assert mine["status"] == "succeeded", mine
        queued, started = _at(mine["created_at"]), _at(mine["started_at"])
        jobs = prebuild_jobs()
        assert all(job["priority"] == "low" for job in jobs)
        # The prebuild builds the person's build waited for: those a daemon was running when it was queued, or
        # took before it (in the moment between its row's time and its commit): at most one per daemon.
        ahead = [job for job in jobs if job["started_at"] and _at(job["started_at"]) <= started]
        waited_for = [job for job in ahead if not job["completed_at"] or _at(job["completed_at"]) > queued]
        assert len(waited_for) <= DAEMONS, [job["id"] for job in waited_for]
        # And many prebuilds were still waiting when it started: the person did not simply come last.
        assert sum(1 for job in jobs if not job["started_at"] or _at(job["started_at"]) > started) >= POOL - 2 * DAEMONS
