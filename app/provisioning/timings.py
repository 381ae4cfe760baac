"""Storing the timings a daemon sends with a job's outcome (protocol/timings.py); app/timings reads them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert

from app.core.columns import parse_rfc3339
from app.core.extensions import db
from app.provisioning.models import ProvisionerJobTiming
from protocol.timings import ProvisionerTiming


def add_job_timings(job_id: str, timings: Sequence[ProvisionerTiming]) -> None:
    """Insert the job's bars in the session's transaction (the caller's commit stores them with the outcome, its
    rollback drops them). A bar whose times do not parse, or that ends before it starts, is dropped: timings explain
    a build, they never fail one. One multi-row INSERT, not an ORM object per bar: a build of hundreds of resources
    must not slow the completion it rides on."""
    rows: list[dict[str, object]] = []
    for timing in timings:
        started, ended = parse_rfc3339(timing.started_at), parse_rfc3339(timing.ended_at)
        if started is None or ended is None or ended < started:
            continue
        rows.append(
            {"job_id": job_id, "stage": timing.stage, "source": timing.source, "action": timing.action,
             "resource": timing.resource, "started_at": started, "ended_at": ended}
        )  # fmt: skip
    if rows:
        db.session.execute(insert(ProvisionerJobTiming), rows)
