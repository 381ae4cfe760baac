"""--log-retention: logs of jobs that finished long ago keep their first and last lines and every error, with one
line saying how many went; recent and running jobs, and short logs, are untouched; off by default."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from app.core.columns import utcnow
from app.core.config import Settings, load_settings
from app.core.extensions import db
from app.provisioning.models import ProvisionerJob
from app.provisioning.retention import KEEP_FIRST, KEEP_LAST, trim_old_logs
from tests.conftest import Persona
from tests.support.daemon import running_import

pytestmark = pytest.mark.databases("sqlite", "postgresql")

THIRTY_DAYS = 30 * 86400


def _finished_with_lines(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], outputs: list[str], age: timedelta
) -> tuple[str, str]:
    daemon, job_id, version_id = running_import(client, personas)
    lines = [{"output": output, "level": "error" if output.startswith("Error") else "info"} for output in outputs]
    for start in range(0, len(lines), 1000):
        daemon.call(f"/jobs/{job_id}/logs", {"logs": lines[start : start + 1000]})
    assert daemon.call(f"/jobs/{job_id}/fail", {"error": "Error: boom"}).status_code == 204
    with app.app_context():
        db.session.execute(
            update(ProvisionerJob).where(ProvisionerJob.id == job_id).values(completed_at=utcnow() - age)
        )
        db.session.commit()
    return job_id, version_id


def _log(client: FlaskClient, personas: dict[str, Persona], version_id: str) -> list[str]:
    reply = client.get(f"/api/v2/templateversions/{version_id}/logs", headers=personas["bob"].auth)
    return [line["output"] for line in reply.json]


def _trim(app: Flask, settings: Settings, retention: int) -> int:
    with app.app_context():
        return trim_old_logs(replace(settings, log_retention=retention))


def test_old_logs_keep_their_head_tail_and_errors(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], settings: Settings
) -> None:
    outputs = [f"line {number}" for number in range(1000)]
    outputs[500] = "Error: the one line that matters"
    old_job, old_version = _finished_with_lines(app, client, personas, outputs, timedelta(days=31))
    _, recent_version = _finished_with_lines(app, client, personas, outputs, timedelta(days=29))
    _, short_version = _finished_with_lines(app, client, personas, outputs[:60], timedelta(days=31))

    assert _trim(app, settings, 0) == 0  # off: nothing happens
    assert _trim(app, settings, THIRTY_DAYS) == 2  # the old long log, and the old short one (kept whole)
    kept = _log(client, personas, old_version)
    removed = 1000 - KEEP_FIRST - KEEP_LAST - 1  # the error line stays
    assert kept[:KEEP_FIRST] == outputs[:KEEP_FIRST]
    assert (
        kept[KEEP_FIRST]
        == f"… {removed} line(s) removed by log retention (logs of jobs finished more than 30 day(s) ago) …"
    )
    assert kept[KEEP_FIRST + 1] == "Error: the one line that matters"
    assert kept[-KEEP_LAST:] == outputs[-KEEP_LAST:]
    assert len(kept) == KEEP_FIRST + 1 + 1 + KEEP_LAST
    assert _log(client, personas, recent_version) == outputs
    assert _log(client, personas, short_version) == outputs[:60]
    job = client.get(f"/api/v2/provisionerjobs/{old_job}", headers=personas["alice"].auth).json
    assert job["error"] == "Error: boom"
    assert _trim(app, settings, THIRTY_DAYS) == 0  # each job once


def test_the_setting_reads_durations_and_zero() -> None:
    assert load_settings({"SLIPWAY_LOG_RETENTION": "30d"}).log_retention == THIRTY_DAYS
    assert load_settings({}).log_retention == 0
