"""The queries that grow with history are served by indexes, on both databases: a page of one job's log, the
job lists filtered by an active status, a page of a template's versions, a page of everyone's workspaces and the
error lines of failed jobs. (Asked of the planner with EXPLAIN; on PostgreSQL with sequential scans discouraged,
since on a test's few rows a scan is what it would pick anyway.)"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Select, select, text, update

from app.catalog.models import Template
from app.catalog.services import versions_query
from app.core.extensions import db
from app.provisioning.failures import error_lines_query
from app.provisioning.jobs import job_logs_query
from app.provisioning.models import (
    ACTIVE_STATUSES,
    AWAITING_CONFIRMATION,
    CANCELED,
    CANCELING,
    FAILED,
    JOB_STATUSES,
    PENDING,
    RUNNING,
    SUCCEEDED,
    ProvisionerJob,
)  # fmt: skip
from app.provisioning.overview import jobs_query
from app.users.models import ROLE_OWNER, User
from app.workspaces.services import visible_workspaces_query
from tests.conftest import Persona
from tests.support.daemon import push_version

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def plan(query: Select[Any], discouraged: tuple[str, ...] = ("seqscan",)) -> str:
    engine = db.engine
    statement = query.compile(engine, compile_kwargs={"literal_binds": True})
    if engine.dialect.name == "postgresql":
        for method in discouraged:
            db.session.execute(text(f"SET LOCAL enable_{method} = off"))
        rows = db.session.execute(text(f"EXPLAIN {statement}"))
        return "\n".join(str(row[0]) for row in rows)
    rows = db.session.execute(text(f"EXPLAIN QUERY PLAN {statement}"))
    return "\n".join(str(row[-1]) for row in rows)


def test_a_page_of_one_jobs_log_uses_the_job_and_id_index(app: Flask) -> None:
    with app.app_context():
        shown = plan(job_logs_query("00000000-0000-0000-0000-000000000000", after=500, limit=1000))
        db.session.rollback()
    assert "ix_provisioner_job_logs_job_id_id" in shown, shown


@pytest.mark.parametrize("statuses", [[PENDING], [RUNNING], list(ACTIVE_STATUSES)])
def test_active_status_filters_look_only_at_unfinished_jobs(app: Flask, statuses: list[str]) -> None:
    with app.app_context():
        shown = plan(jobs_query(statuses, limit=50))
        db.session.rollback()
    # PostgreSQL takes the partial index (already in created_at order); SQLite searches completed_at's for NULL.
    assert "ix_provisioner_jobs_unfinished" in shown or "ix_provisioner_jobs_completed_at (completed_at=?)" in shown
    assert "Seq Scan" not in shown and "SCAN provisioner_jobs" not in shown, shown


def test_before_the_rewrite_the_status_filter_scanned_every_job(app: Flask) -> None:
    """What the test above guards against: the status CASE expression that no index serves."""
    with app.app_context():
        shown = plan(select(ProvisionerJob).where(ProvisionerJob.status == PENDING))
        db.session.rollback()
    assert "Seq Scan" in shown or "SCAN provisioner_jobs" in shown, shown


def test_the_indexable_filter_answers_as_the_status_does(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    now = datetime.now(UTC)
    shapes: dict[str, dict[str, object]] = {
        PENDING: {},
        RUNNING: {"started_at": now},
        AWAITING_CONFIRMATION: {"started_at": now, "awaiting_confirmation_at": now},
        CANCELING: {"started_at": now, "canceled_at": now},
        SUCCEEDED: {"started_at": now, "completed_at": now},
        CANCELED: {"canceled_at": now, "completed_at": now},
        FAILED: {"started_at": now, "completed_at": now, "error": "boom"},
        "failed, not yet completed": {"started_at": now, "error": "boom"},
        "succeeded, empty error": {"started_at": now, "completed_at": now, "error": ""},
    }
    ids = {shape: push_version(client, personas["bob"])["job"]["id"] for shape in shapes}
    with app.app_context():
        for shape, values in shapes.items():
            if not values:
                continue  # pending as pushed
            db.session.execute(update(ProvisionerJob).where(ProvisionerJob.id == ids[shape]).values(**values))
        db.session.commit()
        for status in JOB_STATUSES:
            by_case = set(db.session.scalars(select(ProvisionerJob.id).where(ProvisionerJob.status == status)))
            rewritten = set(db.session.scalars(select(ProvisionerJob.id).where(ProvisionerJob.status_in([status]))))
            assert rewritten == by_case and by_case, status


def test_a_page_of_a_templates_versions_is_read_in_the_index_order(app: Flask) -> None:
    """Newest first, a page at a time: the versions are read from (template_id, created_at, id) in that order, not
    all found and then sorted."""
    template = Template(id="00000000-0000-0000-0000-000000000000")
    with app.app_context():
        shown = plan(versions_query(template).limit(25).offset(50))
        db.session.rollback()
    assert "ix_template_versions_template_id_created_at" in shown, shown
    assert "TEMP B-TREE" not in shown and "Sort" not in shown, shown


def test_a_page_of_everyones_workspaces_is_read_in_the_name_index_order(app: Flask) -> None:
    """The owner's list, by name: the first page of 10,000 workspaces is read from (name_key, id), not all joined
    with their owners and templates and then sorted (40 ms at 10,000 on PostgreSQL before the index)."""
    owner = User(id="00000000-0000-0000-0000-000000000000", roles=[ROLE_OWNER])
    with app.app_context():
        shown = plan(visible_workspaces_query(owner).limit(25).offset(50), discouraged=("seqscan", "sort"))
        db.session.rollback()
    assert "ix_workspaces_name_key_id" in shown, shown
    assert "TEMP B-TREE" not in shown and "Sort" not in shown, shown


def test_a_failed_jobs_cause_is_read_from_its_error_lines_only(app: Flask) -> None:
    """The causes of a page of failed jobs come from the partial index of error lines, never from a walk of every
    line those jobs logged (a failed build may have logged hundreds of thousands)."""
    with app.app_context():
        shown = plan(
            error_lines_query(["00000000-0000-0000-0000-000000000000", "11111111-1111-1111-1111-111111111111"])
        )
        db.session.rollback()
    assert "ix_provisioner_job_logs_errors" in shown, shown
