"""Queue places computed from grouped counts agree with their definition, job by job and daemon by daemon.

The definition: each online daemon takes the pending jobs it can run (tags, Terraform) high priority first, then
oldest first; a job's position is the best place it has in any such daemon's queue, its queue size the longest of
those queues, and a job no daemon can take has neither. Here a mix of tag sets, priorities, Terraform constraints
and daemons (some of them offline) is checked against a direct walk of that definition.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.columns import utcnow
from app.core.extensions import db
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob
from app.provisioning.queue import QueueInfo, matching_daemons, needs_terraform, online_daemons, queue_infos
from protocol.tags import PRIORITY_HIGH, PRIORITY_LOW, normalise_tags, queue_name
from tests.conftest import Persona
from tests.support.daemon import push_version

pytestmark = pytest.mark.databases("sqlite", "postgresql")

REGIONS = ({}, {"region": "eu"}, {"region": "us"}, {"region": "eu", "gpu": "yes"})
TERRAFORM = (None, ">= 1.5", ">= 99")


def by_definition(jobs: list[ProvisionerJob]) -> dict[str, QueueInfo]:
    daemons = online_daemons()
    pending = db.session.scalars(
        select(ProvisionerJob)
        .where(ProvisionerJob.started_at.is_(None), ProvisionerJob.completed_at.is_(None))
        .where(ProvisionerJob.canceled_at.is_(None))
        .order_by(*ProvisionerJob.queue_order())
    )
    queued: Counter[str] = Counter()
    places: dict[str, list[int]] = {}
    takers: dict[str, list[str]] = {}
    for job in pending:
        takers[job.id] = [daemon.id for daemon in matching_daemons(job, daemons)]
        for daemon_id in takers[job.id]:
            queued[daemon_id] += 1
            places.setdefault(job.id, []).append(queued[daemon_id])
    expected = {}
    for job in jobs:
        if job.id not in takers:  # not pending: only how many daemons could run it
            expected[job.id] = QueueInfo(available=len(matching_daemons(job, daemons)))
        elif takers[job.id]:
            size = max(queued[daemon_id] for daemon_id in takers[job.id])
            expected[job.id] = QueueInfo(min(places[job.id]), size, len(takers[job.id]))
        else:
            expected[job.id] = QueueInfo(needs_terraform=needs_terraform(job, daemons))
    return expected


@pytest.mark.parametrize("seed", [1, 2])
def test_positions_and_sizes_match_a_walk_of_every_daemons_queue(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], seed: int
) -> None:
    pick = random.Random(seed)
    template = push_version(client, personas["bob"])
    with app.app_context():
        first = db.session.get(ProvisionerJob, template["job"]["id"])
        assert first is not None
        start = utcnow() - timedelta(hours=1)
        for number in range(8):
            extra = dict(pick.choice(REGIONS[1:] + ({"region": "eu", "gpu": "yes", "arch": "arm"},)))
            seen = utcnow() - (timedelta(minutes=5) if number == 7 else timedelta())  # the last one is offline
            db.session.add(
                ProvisionerDaemon(
                    name=f"d{number}", tags=normalise_tags(extra if number % 3 else {}), auth="psk",
                    last_seen_at=seen, created_at=start + timedelta(seconds=number),
                    terraform_version=pick.choice(("1.9.8", "")),
                )
            )  # fmt: skip
        for number in range(60):
            tags = normalise_tags(pick.choice(REGIONS))
            priority = pick.choice((PRIORITY_HIGH, PRIORITY_HIGH, PRIORITY_LOW))
            job = ProvisionerJob(
                type=first.type, file_id=first.file_id, initiator_id=first.initiator_id, tags=tags,
                queue=queue_name(tags, priority), priority=priority, required_terraform=pick.choice(TERRAFORM),
                created_at=start + timedelta(seconds=pick.randrange(40)),  # some at the same moment: id decides
            )  # fmt: skip
            if number % 7 == 0:
                job.started_at = job.created_at  # running, not queued
            db.session.add(job)
        db.session.commit()

        jobs = list(db.session.scalars(select(ProvisionerJob)))
        expected = by_definition(jobs)
        assert queue_infos(jobs) == {job.id: expected[job.id] for job in jobs}
        placed = [info for info in expected.values() if info.position]
        assert len(placed) > 10 and len({info.size for info in placed}) > 1, "the mix has queues of several sizes"
        db.session.remove()
