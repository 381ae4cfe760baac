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
from sqlalchemy import func, select

from app.core.extensions import db
from app.provisioning.models import PENDING, ProvisionerDaemon, ProvisionerJob
from protocol.tags import LOW_PRIORITY_SUFFIX, daemon_can_run
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
    query = select(ProvisionerDaemon).where(ProvisionerDaemon.online())
    return list(db.session.scalars(query.order_by(ProvisionerDaemon.created_at)))


def untagged_rule() -> str:
    rule: str = current_app.config["SLIPWAY_SETTINGS"].provisioner_untagged_jobs
    return rule


def queue_depths() -> Counter[str]:
    """Pending jobs per tag set and organisation (the queue's name without its priority), of both priorities: what
    autoscalers scale on and the health report watches."""
    query = select(ProvisionerJob.queue, func.count()).where(ProvisionerJob.waiting()).group_by(ProvisionerJob.queue)
    depths: Counter[str] = Counter()
    for queue, count in db.session.execute(query):
        depths[queue.removesuffix(LOW_PRIORITY_SUFFIX)] += count
    return depths


def terraform_fits(daemon: ProvisionerDaemon, job: ProvisionerJob) -> bool:
    """The daemon's Terraform satisfies the template's required_version (a daemon that did not say fits none)."""
    return not job.required_terraform or satisfies(daemon.terraform_version, job.required_terraform)


def serves(daemon: ProvisionerDaemon, job: ProvisionerJob, rule: str) -> bool:
    """The daemon is of the job's organisation and its tags take the job (Terraform aside)."""
    return daemon.organization_id == job.organization_id and daemon_can_run(daemon.tags, job.tags, rule)


def matching_daemons(job: ProvisionerJob, daemons: Sequence[ProvisionerDaemon]) -> list[ProvisionerDaemon]:
    rule = untagged_rule()
    return [daemon for daemon in daemons if serves(daemon, job, rule) and terraform_fits(daemon, job)]


def needs_terraform(job: ProvisionerJob, daemons: Sequence[ProvisionerDaemon]) -> str:
    """Why no daemon takes a job whose tags some online daemons serve: "needs terraform >= 1.12; daemons have
    1.11.4" ("" when its tags are the obstacle, or nothing is)."""
    if not job.required_terraform:
        return ""
    rule = untagged_rule()
    tagged = [daemon for daemon in daemons if serves(daemon, job, rule)]
    if not tagged or any(terraform_fits(daemon, job) for daemon in tagged):
        return ""
    have = sorted({daemon.terraform or "an unknown version" for daemon in tagged})
    return f"needs terraform {job.required_terraform}; daemons have {', '.join(have)}"


@dataclass(frozen=True)
class _Group:
    """Pending jobs that every daemon takes or leaves alike: one queue (tag set, priority and organisation) and
    Terraform need."""

    queue: str
    required_terraform: str | None
    organization_id: str


def queue_infos(jobs: Sequence[ProvisionerJob]) -> dict[str, QueueInfo]:
    """QueueInfo for each of ``jobs``, from one pass over the waiting jobs whatever the number of jobs asked about.

    Daemons are matched against each group of pending jobs rather than each job, and daemons that match the same
    groups share their queue: a job's position under such daemons is the number of their groups' jobs served no
    later than it.
    """
    daemons = online_daemons()
    waiting = _waiting_in_order({job.id for job in jobs if job.status == PENDING})
    serving = {group: _daemons_serving(group, tags, daemons) for group, tags in waiting.tags.items()}
    # Daemons that take the same groups have the same queue; each such queue, by the groups it holds.
    queues = {frozenset(group for group in serving if daemon.id in serving[group]) for daemon in daemons}
    # How many daemons take each group's jobs, matched once per group: a page's finished jobs mostly share a few.
    able = {group: len(daemon_ids) for group, daemon_ids in serving.items()}
    infos = {}
    for job in jobs:
        group = _Group(job.queue, job.required_terraform, job.organization_id)
        if job.status != PENDING or group not in serving or job.id not in waiting.ahead:
            if group not in able:
                able[group] = len(matching_daemons(job, daemons))
            infos[job.id] = QueueInfo(available=able[group])
        else:
            held_in = [queue for queue in queues if group in queue]
            ahead = waiting.ahead[job.id]
            position = min((sum(ahead[other] for other in queue) for queue in held_in), default=0)
            size = max((sum(waiting.totals[other] for other in queue) for queue in held_in), default=0)
            infos[job.id] = QueueInfo(position, size, len(serving[group]))
        if job.status == PENDING and infos[job.id].available == 0:
            infos[job.id] = QueueInfo(needs_terraform=needs_terraform(job, daemons))
    return infos


@dataclass(frozen=True)
class _Waiting:
    totals: Counter[_Group]
    # Of each group, the tags (read from one of its jobs).
    tags: dict[_Group, dict[str, str]]
    # For each job asked about, the jobs of each group that daemons serve before it, or it itself.
    ahead: dict[str, Counter[_Group]]


def _waiting_in_order(asked: set[str]) -> _Waiting:
    """One pass over the waiting jobs in the order daemons take them, reading three short columns of each: cheaper
    than comparing every job asked about with every waiting one in SQL, which grows with their product."""
    query = (
        select(
            ProvisionerJob.id, ProvisionerJob.queue, ProvisionerJob.required_terraform, ProvisionerJob.organization_id
        )
        .where(ProvisionerJob.waiting())
        .order_by(*ProvisionerJob.queue_order())
    )
    totals: Counter[_Group] = Counter()
    examples: dict[str, _Group] = {}
    ahead: dict[str, Counter[_Group]] = {}
    for job_id, queue, required, organization_id in db.session.execute(query):
        group = _Group(queue, required, organization_id)
        if group not in totals:
            examples[job_id] = group
        totals[group] += 1
        if job_id in asked:
            ahead[job_id] = totals.copy()
    tags = select(ProvisionerJob.id, ProvisionerJob.tags).where(ProvisionerJob.id.in_(examples))
    return _Waiting(totals, {examples[job_id]: job_tags for job_id, job_tags in db.session.execute(tags)}, ahead)


def _daemons_serving(group: _Group, tags: dict[str, str], daemons: Sequence[ProvisionerDaemon]) -> set[str]:
    example = ProvisionerJob(
        tags=tags, required_terraform=group.required_terraform, organization_id=group.organization_id
    )
    return {daemon.id for daemon in matching_daemons(example, daemons)}


def queue_info(job: ProvisionerJob) -> QueueInfo:
    return queue_infos([job])[job.id]
