"""Log retention (``--log-retention``): the logs of jobs that finished long ago are trimmed to what is still worth
reading — their first and last lines and every error line — and one line in their place says how many went and
why. The job's own error stays on the job. Off (0) by default: nothing is deleted unless an operator asks."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, select, update

from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.provisioning.models import ProvisionerJob, ProvisionerJobLog

KEEP_FIRST, KEEP_LAST = 20, 50
# Jobs trimmed per maintenance pass (every 10 s): a backlog is worked off without one long transaction.
BATCH = 50


def trim_old_logs(settings: Settings) -> int:
    """Trim the logs of up to BATCH jobs finished before the retention period; returns how many were trimmed."""
    if not settings.log_retention:
        return 0
    now = utcnow()
    due = db.session.scalars(
        select(ProvisionerJob.id)
        .where(
            ProvisionerJob.completed_at < now - timedelta(seconds=settings.log_retention),
            ProvisionerJob.logs_trimmed_at.is_(None),
        )
        .order_by(ProvisionerJob.completed_at)
        .limit(BATCH)
    ).all()
    for job_id in due:
        _trim(job_id, _days(settings.log_retention))
        db.session.execute(update(ProvisionerJob).where(ProvisionerJob.id == job_id).values(logs_trimmed_at=now))
        db.session.commit()
    return len(due)


def _trim(job_id: str, age: str) -> None:
    lines = select(ProvisionerJobLog.id).where(ProvisionerJobLog.job_id == job_id)
    head_end = db.session.scalar(lines.order_by(ProvisionerJobLog.id).offset(KEEP_FIRST - 1).limit(1))
    tail_start = db.session.scalar(lines.order_by(ProvisionerJobLog.id.desc()).offset(KEEP_LAST - 1).limit(1))
    if head_end is None or tail_start is None or tail_start <= head_end:
        return  # short enough to keep whole
    middle = (
        ProvisionerJobLog.job_id == job_id,
        ProvisionerJobLog.id > head_end,
        ProvisionerJobLog.id < tail_start,
        ProvisionerJobLog.level != "error",
    )
    first, count = db.session.execute(select(func.min(ProvisionerJobLog.id), func.count()).where(*middle)).one()
    if not count:
        return
    # The first removed line becomes the notice, so that it sits where the lines were (ids give the order).
    notice = f"… {count} line(s) removed by log retention (logs of jobs finished more than {age} ago) …"
    db.session.execute(
        update(ProvisionerJobLog).where(ProvisionerJobLog.id == first).values(output=notice, level="info")
    )
    db.session.execute(delete(ProvisionerJobLog).where(*middle, ProvisionerJobLog.id != first))


def _days(seconds: int) -> str:
    return f"{seconds // 86400} day(s)" if seconds >= 86400 else f"{seconds // 3600} hour(s)"
