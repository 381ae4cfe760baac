"""The daemon keeps a job's outcome on disk until the server has answered it: through a server that does not
answer, and across a restart of the daemon (against the real server app, over a network that refuses requests)."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from protocol.logs import LogLine
from protocol.provisionerd import BuildResult, ImportResult, JobCompletion, JobFailure
from tests.conftest import Persona
from tests.support.daemon import PSK_HEADERS, FakeDaemon, running_import
from tests.support.network_faults import UnreliableNetwork
from workers import runner as runner_module
from workers.client import ProvisionerClient
from workers.job_control import RunnerSettings
from workers.outbox import Outbox, Undelivered
from workers.runner import JobRunner

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def test_entries_round_trip_privately_and_an_unreadable_one_is_set_aside(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox")
    failure = Undelivered("job-1", JobFailure(error="boom", state=b"{}"), 3, (LogLine(output="last words"),))
    outbox.keep(Undelivered("job-0", JobCompletion(workspace_build=BuildResult(state=b'{"serial": 2}'))))
    outbox.keep(failure)
    (tmp_path / "outbox" / "job-2.json").write_text("{not json")
    assert list(outbox.pending()) == [
        Undelivered("job-0", JobCompletion(workspace_build=BuildResult(state=b'{"serial": 2}'))),
        failure,
    ]
    assert (tmp_path / "outbox" / "job-2.json.unreadable").exists()
    assert {oct(path.stat().st_mode & 0o777) for path in (tmp_path / "outbox").glob("*.json")} == {"0o600"}
    outbox.forget("job-0")
    assert [entry.job_id for entry in outbox.pending()] == ["job-1"]
    with pytest.raises(ValueError, match="not a job id"):
        outbox.forget("../escape")


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "DELIVERY_RETRY_SECONDS", (0.01, 0.05))


def _runner(app: Flask, daemon: FakeDaemon, network: UnreliableNetwork, cache: Path) -> JobRunner:
    server = ProvisionerClient("http://slipway.test", credential=PSK_HEADERS, retry_for=0, transport=network)
    server.daemon_id = daemon.id
    return JobRunner(server, RunnerSettings(cache_dir=cache))


def test_an_outcome_waits_out_a_server_that_does_not_answer_then_goes_once(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], tmp_path: Path, quick_retries: None
) -> None:
    daemon, job_id, version_id = running_import(client, personas)
    network = UnreliableNetwork(app, refuse=20, lose_replies=1)
    runner = _runner(app, daemon, network, tmp_path)
    entry = Undelivered(job_id, JobCompletion(template_import=ImportResult()), 0, (LogLine(output="the last line"),))
    runner.deliver(entry)
    assert network.refuse == 0 and network.lose_replies == 0
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["status"] == "succeeded"
    logs = client.get(f"/api/v2/templateversions/{version_id}/logs", headers=personas["bob"].auth).json
    assert [line["output"] for line in logs] == ["the last line"]
    assert list(Outbox(runner.settings.outbox).pending()) == []


def test_a_daemon_stopped_while_the_server_is_away_reports_at_its_next_start(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], tmp_path: Path, quick_retries: None
) -> None:
    daemon, job_id, _ = running_import(client, personas)
    away = _runner(app, daemon, UnreliableNetwork(app, refuse=10**6), tmp_path)
    delivering = threading.Thread(target=away.deliver, args=(Undelivered(job_id, JobFailure(error="apply failed")),))
    delivering.start()
    away.interrupt("The provisioner daemon was stopped (SIGINT) while running this job.")
    delivering.join(30)
    assert not delivering.is_alive()
    assert [entry.job_id for entry in Outbox(away.settings.outbox).pending()] == [job_id]

    again = _runner(app, daemon, UnreliableNetwork(app), tmp_path)
    again.deliver_kept()
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["status"] == "failed" and job["error"] == "apply failed"
    assert list(Outbox(again.settings.outbox).pending()) == []


def test_an_outcome_kept_for_a_job_the_server_ended_meanwhile_is_taken_not_retried_forever(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], tmp_path: Path
) -> None:
    """The daemon restarted (which fails what it held) and then reports what it kept: the server takes it as late
    (tests/test_late_outcomes.py: a build's state is recorded), and the entry goes."""
    daemon, job_id, _ = running_import(client, personas)
    Outbox(tmp_path / "outbox").keep(Undelivered(job_id, JobFailure(error="x", state=base64.b64encode(b"{}"))))
    FakeDaemon(client)  # registering again: the held job is failed ("restarted")
    runner = _runner(app, daemon, UnreliableNetwork(app), tmp_path)
    runner.deliver_kept()
    assert list(Outbox(runner.settings.outbox).pending()) == []
