"""The tag truth table of reference §2, with real `slipway provisionerd start` processes and a real server.

For each daemon tag set one daemon process runs; each job of its rows is queued while the daemon is idle and
must either be taken (it runs) or stay pending. Under `untagged-only` an untagged job needs an untagged daemon;
under `any` (the default) tagged organization daemons take untagged jobs too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, push_import, user_token, wait_job
from tests.support.server import ServerProcess

ENV, DC = {"env": "prod"}, {"env": "prod", "dc": "new_york"}
CHICAGO = {"env": "prod", "dc": "chicago"}
USER = {"scope": "user"}
# How long a job must stay pending, next to an idle daemon, to count as "not taken" (taking one needs ~0.1 s).
NOT_TAKEN_AFTER = 2.5


@dataclass(frozen=True)
class Row:
    job_owner: str  # org, aaa or bbb: who pushes the job, and whether it is user-scoped
    job_tags: dict[str, str]
    runs_any: bool
    runs_untagged_only: bool


# Daemon: (credential: psk or aaa's token, tags) → rows of (job) against it. Reference §2's docs table, plus
# the rows where the two untagged settings differ.
TABLE: dict[str, tuple[str, dict[str, str], list[Row]]] = {
    "org-untagged": ("psk", {}, [
        Row("org", {}, True, True),
        Row("org", ENV, False, False),
        Row("aaa", USER, False, False),
        Row("aaa", {**USER, **ENV}, False, False),
    ]),
    "org-env": ("psk", ENV, [
        Row("org", ENV, True, True),
        Row("org", {}, True, False),
        Row("org", DC, False, False),
    ]),
    "org-env-dc": ("psk", DC, [
        Row("org", ENV, True, True),
        Row("org", DC, True, True),
        Row("org", CHICAGO, False, False),
        Row("org", {}, True, False),
    ]),
    "user-aaa": ("aaa", USER, [
        Row("aaa", USER, True, True),
        Row("org", {}, False, False),
        Row("bbb", USER, False, False),
        Row("aaa", {**USER, **ENV}, False, False),
    ]),
    "user-aaa-env": ("aaa", {**USER, **ENV}, [
        Row("aaa", USER, True, True),
        Row("aaa", {**USER, **ENV}, True, True),
        Row("aaa", {**USER, **DC}, False, False),
    ]),
    "user-aaa-env-dc": ("aaa", {**USER, **CHICAGO}, [
        Row("aaa", {**USER, **ENV}, True, True),
        Row("aaa", {**USER, **CHICAGO}, True, True),
        Row("aaa", {**USER, **DC}, False, False),
    ]),
}  # fmt: skip


@dataclass
class Deployment:
    server: ServerProcess
    clients: dict[str, httpx.Client]
    tokens: dict[str, str]


@pytest.fixture(scope="module", params=["any", "untagged-only"])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    data = tmp_path_factory.mktemp(f"routing-{request.param}")
    with ServerProcess(
        data / "data",
        "--provisioner-daemons",
        "0",
        "--provisioner-untagged-jobs",
        request.param,
        env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK},
    ) as server:
        owner = api_client(server.url, sign_up_owner(server.url, PASSWORD))
        # aaa and bbb are template admins: they may push templates, and so user-scoped imports of their own.
        tokens = {name: user_token(server.url, owner, name, ["template-admin"], PASSWORD) for name in ("aaa", "bbb")}
        clients = {"org": owner, **{name: api_client(server.url, token) for name, token in tokens.items()}}
        yield Deployment(server, clients, tokens)
        for client in clients.values():
            client.close()


@pytest.mark.parametrize("daemon_kind", sorted(TABLE))
def test_routing_truth_table(
    deployment: Deployment, daemon_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    credential, daemon_tags, rows = TABLE[daemon_kind]
    untagged_rule = request.node.callspec.params["deployment"]
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK} if credential == "psk" else {
        "SLIPWAY_SESSION_TOKEN": deployment.tokens[credential]
    }  # fmt: skip
    tag_args = [arg for key, value in daemon_tags.items() for arg in ("--tag", f"{key}={value}")]
    name = f"{daemon_kind}-{untagged_rule}"
    observed, expected = [], []
    with DaemonProcess(deployment.server.url, name, tmp_path, *tag_args, env=env) as daemon:
        daemon.wait_registered(deployment.clients["org"])
        for row in rows:
            api = deployment.clients[row.job_owner]
            job = push_import(api, row.job_tags)["job"]
            runs = row.runs_any if untagged_rule == "any" else row.runs_untagged_only
            seen = wait_job(api, job["id"], ("running", "succeeded", "failed"), timeout=30 if runs else NOT_TAKEN_AFTER)
            took = seen["status"] != "pending"
            observed.append((row.job_owner, row.job_tags, took, seen["worker_name"]))
            expected.append((row.job_owner, row.job_tags, runs, name if runs else ""))
            _settle(api, job["id"])
    assert observed == expected, f"daemon {daemon_tags} under {untagged_rule}:\n{daemon.log()}"


def _settle(api: httpx.Client, job_id: str) -> None:
    """Cancel whatever is left of the row's job and wait for it to end, so the daemon is idle for the next row."""
    api.patch(f"/provisionerjobs/{job_id}/cancel")
    deadline = time.monotonic() + 30
    while api.get(f"/provisionerjobs/{job_id}").json()["status"] in ("pending", "running", "canceling"):
        assert time.monotonic() < deadline, f"job {job_id} did not end"
        time.sleep(0.1)


def test_each_organisations_daemon_process_imports_only_its_templates(deployment: Deployment, tmp_path: Path) -> None:
    """Real `provisionerd start --org` processes and real Terraform: acme's daemon imports acme's version and leaves
    the default organisation's alone; the default organisation's daemon imports that one."""
    owner = deployment.clients["org"]
    created = owner.post("/organizations", json={"name": "acme"})
    assert created.status_code == 201, created.text  # each untagged rule's deployment is a server of its own
    env = {"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}
    with DaemonProcess(deployment.server.url, "acme-daemon", tmp_path, "--org", "acme", env=env) as acme:
        assert acme.wait_registered(owner)["organization_id"] == created.json()["id"]
        ours = push_import(owner)["job"]
        theirs = push_import(owner, organization="acme")["job"]
        done = wait_job(owner, theirs["id"], ("succeeded", "failed"))
        assert (done["status"], done["worker_name"]) == ("succeeded", acme.name), acme.log()
        # Queued first, the default organisation's job is still waiting: acme's idle daemon leaves it alone (the
        # module's earlier daemons of the default organisation may still count as online, but are gone).
        waiting = wait_job(owner, ours["id"], ("running", "succeeded", "failed"), timeout=NOT_TAKEN_AFTER)
        assert (waiting["status"], waiting["worker_name"]) == ("pending", ""), waiting
        with DaemonProcess(deployment.server.url, "default-daemon", tmp_path, env=env) as default:
            default.wait_registered(owner)
            done = wait_job(owner, ours["id"], ("succeeded", "failed"))
            assert (done["status"], done["worker_name"]) == ("succeeded", default.name), default.log()
