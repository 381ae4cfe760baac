"""A build whose apply fails part-way leaves real resources behind (a process, its agent): the daemon reads them
from the state Terraform left and reports them with the failure, and the workspace page and the API list them as
the failed build's, instead of "No resources while failed"."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from protocol.logs import LogLine
from protocol.provisionerd import AcquiredJob, BuildJob, BuildMetadata, JobFailure
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import FakeDaemon, held_first_build, import_template
from tests.support.web import sign_in
from workers.flows import _left_resources, run_job
from workers.job_control import JobControl, RunnerSettings

# Real Terraform runs (a build that fails part way): not in `make test-quick`'s loop.
pytestmark = [pytest.mark.databases("sqlite"), pytest.mark.terraform]

# The agent's process comes up; the resource after it (a dotfiles clone) fails, as an unreachable repository does.
PARTLY_FAILING = {
    "main.tf": """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
resource "coder_agent" "main" {
  os   = "linux"
  arch = "amd64"
}
resource "terraform_data" "process" {
  input = coder_agent.main.token
}
resource "terraform_data" "dotfiles" {
  depends_on = [terraform_data.process]
  provisioner "local-exec" {
    command = "echo 'fatal: unable to access the repository' >&2; exit 1"
  }
}
"""
}


def failed_build(cache_dir: Path) -> JobFailure:
    """A start build of PARTLY_FAILING run by the daemon's own job flow with real Terraform: its outcome."""
    job = AcquiredJob(
        id="job-1",
        type="workspace_build",
        tags={"scope": "organization", "owner": ""},
        access_url="http://127.0.0.1:3000",
        workspace_build=BuildJob(
            workspace_build_id="b1",
            transition="start",
            archive=tar_of(PARTLY_FAILING),
            metadata=BuildMetadata(
                workspace_name="dev",
                workspace_id="w1",
                workspace_build_id="b1",
                owner_name="carol",
                owner_id="u1",
                owner_email="carol@example.com",
            ),
        ),
    )
    lines: list[LogLine] = []
    lock = threading.Lock()

    def log(line: LogLine) -> None:
        with lock:
            lines.append(line)

    outcome = run_job(job, RunnerSettings(cache_dir), log, JobControl(job.id))
    assert isinstance(outcome, JobFailure), "\n".join(line.output for line in lines)
    return outcome


def test_a_build_that_fails_part_way_lists_the_resources_its_state_holds(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], tmp_path: Path
) -> None:
    failure = failed_build(tmp_path)
    assert failure.state and "local-exec" in failure.error
    listed = {resource.name: resource for resource in failure.resources}
    assert "process" in listed and [agent.name for agent in listed["process"].agents] == ["main"]

    # The server records the failure as the daemon reports it.
    daemon = FakeDaemon(client)
    workspace = held_first_build(client, personas, daemon, import_template(client, personas, daemon))
    reply = daemon.call(f"/jobs/{workspace['latest_build']['job']['id']}/fail", failure.to_json())
    assert reply.status_code == 204, reply.json
    carol = personas["carol"].auth
    build = client.get(f"/api/v2/workspaces/{workspace['id']}", headers=carol).json["latest_build"]
    assert build["status"] == "failed"
    assert "process" in {resource["name"] for resource in build["resources"]}

    pages = app.test_client()
    sign_in(pages, "carol@example.com", PASSWORD)
    page = pages.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    resources = page[page.index('id="resources-card"') : page.index('id="parameters-card"')]
    assert "<code>terraform_data.process</code>" in resources and "No resources" not in resources
    assert ">main</strong>" in resources  # its agent, whose panel the page shows too
    assert 'id="connect"' in page


def test_a_failure_without_state_reports_no_resources(tmp_path: Path) -> None:
    """A plan that fails changed nothing: no state, no resources (and an unreadable state is reported without
    them, the failure itself kept)."""
    assert _left_resources(None) == () and _left_resources(b"") == ()
    assert _left_resources(b"not json") == ()
