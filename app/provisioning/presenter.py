"""Jobs as the API shows them (API.md's job object), read for a whole list at once: a page of 200 jobs costs
the same few queries as one job (their queue places, and the names of the daemons running them)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from app.core.extensions import db
from app.provisioning.failures import failure_causes
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from app.provisioning.queue import queue_infos
from protocol.codec import JsonObject


def worker_names(jobs: Sequence[ProvisionerJob]) -> dict[str, str]:
    ids = {job.worker_id for job in jobs if job.worker_id}
    if not ids:
        return {}
    query = select(ProvisionerDaemon.id, ProvisionerDaemon.name).where(ProvisionerDaemon.id.in_(ids))
    return {daemon_id: name for daemon_id, name in db.session.execute(query)}


def jobs_json(jobs: Sequence[ProvisionerJob]) -> dict[str, JsonObject]:
    """Each job's API object, by id: the row, its place in the queue, the name of the daemon running it, and why it
    failed."""
    infos = queue_infos(jobs)
    names = worker_names(jobs)
    causes = failure_causes(jobs)
    return {
        job.id: job.to_json(
            queue_position=infos[job.id].position,
            queue_size=infos[job.id].size,
            available_workers=infos[job.id].available,
            # Set when the only obstacle is the Terraform version: what the template needs, what daemons have.
            waiting_for_terraform=infos[job.id].needs_terraform,
            worker_name=names.get(job.worker_id or "", ""),
            # Why it failed (protocol.logs.FailureCause), or None: its first line, resource and log line.
            failure=cause.to_json() if (cause := causes[job.id]) else None,
        )
        for job in jobs
    }


def job_json(job: ProvisionerJob) -> JsonObject:
    return jobs_json([job])[job.id]
