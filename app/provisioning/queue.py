"""Where pending jobs stand: which online daemons can take each, and its place in their queues (reference §1.10).

A job's position is the best it has among the daemons that could run it (each daemon takes high-priority jobs
before low ones, each oldest first); the queue size is the longest of those daemons' queues. Both are 0 when no
online daemon matches, which is the case pages call out ("no provisioner matches tags …") instead of leaving people
to wait.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import select

from app.core.columns import utcnow
from app.core.extensions import db
from app.provisioning.models import DAEMON_STALE_AFTER, PENDING, ProvisionerDaemon, ProvisionerJob
from protocol.tags import daemon_can_run, queue_name
from protocol.terraform_versions import satisfies


@dataclass(frozen=True)
class QueueInfo:
    position: int = 0
    size: int = 0
    # Online daemons whose tags (and Terraform) can take the job, busy or not.
    available: int = 0
    # When daemons with the right tags are online but none runs a Terraform the template allows: what it needs.
    needs_terraform: str = ""


def online_daemons() -> list[ProvisionerDaemon]:
    query = select(ProvisionerDaemon).where(ProvisionerDaemon.last_seen_at >= utcnow() - DAEMON_STALE_AFTER)
    return list(db.session.scalars(query.order_by(ProvisionerDaemon.created_at)))


def pending_jobs() -> list[ProvisionerJob]:
    query = select(ProvisionerJob).where(
        ProvisionerJob.started_at.is_(None),
        ProvisionerJob.completed_at.is_(None),
        ProvisionerJob.canceled_at.is_(None),
    )
    return list(db.session.scalars(query.order_by(*ProvisionerJob.queue_order())))


def untagged_rule() -> str:
    rule: str = current_app.config["SLIPWAY_SETTINGS"].provisioner_untagged_jobs
    return rule


def queue_depths() -> Counter[str]:
    """Pending jobs per tag set, of both priorities: what autoscalers scale on and the health report watches."""
    return Counter(queue_name(job.tags) for job in pending_jobs())


def terraform_fits(daemon: ProvisionerDaemon, job: ProvisionerJob) -> bool:
    """The daemon's Terraform satisfies the template's required_version (a daemon that did not say fits none)."""
    return not job.required_terraform or satisfies(daemon.terraform_version, job.required_terraform)


def matching_daemons(job: ProvisionerJob, daemons: Sequence[ProvisionerDaemon]) -> list[ProvisionerDaemon]:
    rule = untagged_rule()
    return [daemon for daemon in daemons if daemon_can_run(daemon.tags, job.tags, rule) and terraform_fits(daemon, job)]


def needs_terraform(job: ProvisionerJob, daemons: Sequence[ProvisionerDaemon]) -> str:
    """Why no daemon takes a job whose tags some online daemons serve: "needs terraform >= 1.12; daemons have
    1.11.4" ("" when its tags are the obstacle, or nothing is)."""
    if not job.required_terraform:
        return ""
    rule = untagged_rule()
    tagged = [daemon for daemon in daemons if daemon_can_run(daemon.tags, job.tags, rule)]
    if not tagged or any(terraform_fits(daemon, job) for daemon in tagged):
        return ""
    have = sorted({daemon.terraform or "an unknown version" for daemon in tagged})
    return f"needs terraform {job.required_terraform}; daemons have {', '.join(have)}"


def queue_infos(jobs: Sequence[ProvisionerJob]) -> dict[str, QueueInfo]:
    """QueueInfo for each of ``jobs``, from one read of the pending jobs and the online daemons."""
    daemons = online_daemons()
    queued: Counter[str] = Counter()
    best: dict[str, int] = {}
    matches: dict[str, list[str]] = {}
    for job in pending_jobs():  # in the order each daemon will serve them, so that its queue grows in that order
        matches[job.id] = [daemon.id for daemon in matching_daemons(job, daemons)]
        for daemon_id in matches[job.id]:
            queued[daemon_id] += 1
            best[job.id] = min(best.get(job.id, queued[daemon_id]), queued[daemon_id])
    infos = {}
    for job in jobs:
        if job.status == PENDING and job.id in matches:
            daemon_ids = matches[job.id]
            size = max((queued[daemon_id] for daemon_id in daemon_ids), default=0)
            infos[job.id] = QueueInfo(best.get(job.id, 0), size, len(daemon_ids))
        else:
            infos[job.id] = QueueInfo(available=len(matching_daemons(job, daemons)))
        if job.status == PENDING and infos[job.id].available == 0:
            infos[job.id] = QueueInfo(needs_terraform=needs_terraform(job, daemons))
    return infos


def queue_info(job: ProvisionerJob) -> QueueInfo:
    return queue_infos([job])[job.id]
