"""Why a job failed, read from what is already stored: its error and its log's error lines.

Nothing new travels from the daemon: Terraform's diagnostics reach the log as Terraform prints them
(workers/terraform/logs.py), so the first ``Error:`` line is where the cause begins, and its ``with <address>,``
line (or an ``<address>: Creation errored after …`` line) names the resource.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import Select, func, literal_column, select

from app.core.extensions import db
from app.provisioning.models import FAILED, ProvisionerJob, ProvisionerJobLog
from protocol.logs import FailureCause

# Enough to pass Terraform's warnings and the daemon's lines before the first error; a log whose first error lies
# further in still gets a cause, only without a line to link to.
ERROR_LINES_READ = 200
ERROR_LEVEL = "error"

# Terraform's "  with null_resource.setup," (an apply or plan error about one resource) and its hook message
# "null_resource.setup: Creation errored after 1s".
_WITH_RESOURCE = re.compile(r"^\s*with ([A-Za-z0-9_.\[\]\"-]+),\s*$")
_ERRORED = re.compile(r"^([A-Za-z0-9_.\[\]\"-]+): \w+ errored after\b")
# `terraform init`'s preamble before the configuration's own errors (workers/terraform/logs.py skips it too): the
# cause is the error after it.
_GENERIC_INIT_ERROR = "Error: Terraform encountered problems during initiali"


def failure_cause(job: ProvisionerJob) -> FailureCause | None:
    """The cause of ``job``'s failure, or None when it did not fail."""
    if job.status != FAILED:
        return None
    return failure_causes([job])[job.id]


def failure_causes(jobs: Sequence[ProvisionerJob]) -> dict[str, FailureCause | None]:
    """Each job's cause by id (None for those that did not fail): one query for a whole list, each failed job's
    first error lines."""
    failed = [job for job in jobs if job.status == FAILED]
    lines: dict[str, list[tuple[int, str]]] = {job.id: [] for job in failed}
    if failed:
        for job_id, line_id, output in db.session.execute(error_lines_query(list(lines))):
            lines[job_id].append((line_id, output))
    return {job.id: cause_from_lines(job.error or "", lines[job.id]) if job.id in lines else None for job in jobs}


def error_lines_query(job_ids: list[str]) -> Select[str, int, str]:
    """Each job's first ``ERROR_LINES_READ`` error lines (job id, line id, text), in order."""
    log = ProvisionerJobLog
    place = func.row_number().over(partition_by=log.job_id, order_by=log.id).label("place")
    errors = (
        select(log.job_id, log.id, log.output, place)
        # The level as a literal in the SQL, not a parameter: the partial index of error lines is chosen by it.
        .where(log.job_id.in_(job_ids), log.level == literal_column(f"'{ERROR_LEVEL}'"))
        .subquery()
    )
    return (
        select(errors.c.job_id, errors.c.id, errors.c.output)
        .where(errors.c.place <= ERROR_LINES_READ)
        .order_by(errors.c.job_id, errors.c.id)
    )


def cause_from_lines(error: str, error_lines: Sequence[tuple[int, str]]) -> FailureCause:
    """The cause, from the job's error and its error-level log lines (id, text) in order."""
    texts = [(line_id, text) for line_id, text in error_lines if text.strip()]
    headings = [(line_id, text) for line_id, text in texts if text.lstrip().startswith("Error: ")]
    heading = next((found for found in headings if not found[1].lstrip().startswith(_GENERIC_INIT_ERROR)), None)
    first = heading or (texts[0] if texts else None)
    message = _first_line(error) or (_first_line(first[1].strip().removeprefix("Error: ")) if first else "")
    return FailureCause(
        message=message or "The job failed without saying why.",
        resource=_resource([text for _, text in texts]),
        log_line_id=first[0] if first else None,
    )


def _resource(texts: Sequence[str]) -> str:
    for pattern in (_WITH_RESOURCE, _ERRORED):
        for text in texts:
            if match := pattern.match(text):
                return match.group(1)
    return ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
