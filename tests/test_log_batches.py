"""Numbered log batches: a batch sent again after a lost reply is stored once, and a log past its cap costs the
server one small update per batch (the daemon stops sending lines and its numbers say how many were dropped)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.provisioning.daemons import _advance_log_count
from app.provisioning.models import ProvisionerJob, ProvisionerJobLog
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, running_import

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _lines(*outputs: str) -> list[dict[str, str]]:
    return [{"output": output} for output in outputs]


def _stored(client: FlaskClient, personas: dict[str, Persona], version_id: str) -> list[str]:
    reply = client.get(f"/api/v2/templateversions/{version_id}/logs?limit=10000", headers=personas["bob"].auth)
    return [line["output"] for line in reply.json]


def _post(daemon: FakeDaemon, job_id: str, first_seq: int, lines: list[dict[str, str]]) -> Any:
    reply = daemon.call(f"/jobs/{job_id}/logs", {"logs": lines, "first_seq": first_seq})
    assert reply.status_code == 200, reply.json
    return reply.json


def test_a_batch_sent_again_is_stored_once(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon, job_id, version_id = running_import(client, personas)
    _post(daemon, job_id, 0, _lines("a", "b"))
    _post(daemon, job_id, 0, _lines("a", "b"))  # the reply was lost: the daemon sends the same batch again
    _post(daemon, job_id, 1, _lines("b", "c", "d"))  # a retry that picked up lines meanwhile
    _post(daemon, job_id, 4, [])  # a heartbeat
    assert _stored(client, personas, version_id) == ["a", "b", "c", "d"]
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["logs_dropped"] == 0
    # A job that runs again (a plan held for confirmation) goes on from the next number, not from 0.
    assert daemon.call(f"/jobs/{job_id}/acquire").json["first_log_seq"] == 4


def test_past_the_cap_the_daemon_is_told_to_stop_and_its_numbers_count_the_dropped_lines(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon, job_id, version_id = running_import(client, personas)
    full = [{"output": "y" * 1000} for _ in range(1000)]  # 1 MB: the cap falls inside the second batch
    assert _post(daemon, job_id, 0, full) == {"canceled": False, "stop_sending": False}
    assert _post(daemon, job_id, 1000, full)["stop_sending"] is True
    lines_in_second_batch_dropped = 1000 - 48  # 48 more lines of 1,000 bytes fit under 1 MiB (1,048,576 bytes)
    # The daemon then only numbers its lines: its heartbeat says 200,000 more came, in one update.
    assert _post(daemon, job_id, 202_000, [])["stop_sending"] is True
    job = client.get(f"/api/v2/provisionerjobs/{job_id}", headers=personas["alice"].auth).json
    assert job["logs_dropped"] == lines_in_second_batch_dropped + 200_000
    stored = _stored(client, personas, version_id)
    assert len(stored) == 1048 + 1 and stored[-1].startswith("Log limit of 1024 KiB reached")


def test_unnumbered_batches_from_older_daemons_are_stored_as_they_come(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon, job_id, version_id = running_import(client, personas)
    for _ in range(2):
        daemon.call(f"/jobs/{job_id}/logs", {"logs": _lines("same")})
    assert _stored(client, personas, version_id) == ["same", "same"]


def test_of_two_copies_arriving_together_only_one_moves_the_count(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _, job_id, _ = running_import(client, personas)
    with app.app_context():
        assert _advance_log_count(job_id, 0, 5)
        assert not _advance_log_count(job_id, 0, 5)  # the second copy read the count before the first moved it
        db.session.commit()
        job = db.session.get(ProvisionerJob, job_id)
        assert job is not None and job.log_lines_received == 5
        assert db.session.query(ProvisionerJobLog).filter_by(job_id=job_id).count() == 0
