"""Priority: a build a person waits for runs before automatic ones, on both job sources and both databases.

Fifty workspaces pass their deadline together, so one lifecycle tick queues fifty autostop builds; then a person
stops another workspace. Whichever way a daemon takes work — an RQ worker reading its queues in order from real
Redis, or ``POST /jobs/wait`` — the person's build comes next, and the API shows it first in the queue.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from rq import Queue
from rq.serializers import JSONSerializer

from app.core.extensions import db
from app.lifecycle.executor import run_tick
from protocol.tags import LOW_PRIORITY_SUFFIX, UNTAGGED_ANY, daemon_queue_names, normalise_tags, queue_name
from tests.conftest import PASSWORD, Persona, get_redis_of
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

FLOOD = 50


def test_a_daemon_listens_to_every_high_priority_queue_before_any_low_one() -> None:
    daemon = normalise_tags({"region": "eu", "gpu": "a100"})
    names = daemon_queue_names(daemon, UNTAGGED_ANY)
    high, low = names[: len(names) // 2], names[len(names) // 2 :]
    assert low == [name + LOW_PRIORITY_SUFFIX for name in high]
    assert high[0] == queue_name(daemon) and low[0] == queue_name(daemon, "low")
    assert not any(name.endswith(LOW_PRIORITY_SUFFIX) for name in high)
    # The suffix cannot come from a tag: a value ending in "#low" is percent-encoded.
    assert queue_name(normalise_tags({"a": "b#low"})) != queue_name(normalise_tags({"a": "b"}), "low")


class Fleet:
    def __init__(self, app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
        self.app, self.client, self.carol, self.admin = app, client, personas["carol"], personas["alice"]
        self.daemon = FakeDaemon(client)
        self.template = import_template(client, personas, self.daemon)

    def finish(self, job_id: str) -> None:
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        reply = self.daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}})
        assert reply.status_code == 204, reply.json

    def create(self, name: str, **extra: Any) -> dict[str, Any]:
        body = {
            "template_id": self.template["id"],
            "name": name,
            "rich_parameter_values": [{"name": "region", "value": "eu"}],
            **extra,
        }
        reply = self.client.post("/api/v2/workspaces", json=body, headers=self.carol.auth)
        assert reply.status_code == 201, reply.json
        self.finish(reply.json["latest_build"]["job"]["id"])
        workspace = self.client.get(f"/api/v2/workspaces/{reply.json['id']}", headers=self.carol.auth)
        return dict(workspace.json)

    def job(self, job_id: str) -> dict[str, Any]:
        reply = self.client.get(f"/api/v2/provisionerjobs/{job_id}", headers=self.admin.auth)
        assert reply.status_code == 200, reply.json
        return dict(reply.json)


@pytest.fixture
def fleet(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> Fleet:
    return Fleet(app, client, personas)


def test_a_persons_build_runs_before_a_flood_of_automatic_builds(fleet: Fleet, app: Flask) -> None:
    workspaces = [fleet.create(f"auto-{index}", ttl_ms=3_600_000) for index in range(FLOOD)]
    mine = fleet.create("mine")  # no deadline: only its owner stops it
    get_redis_of(app).flushdb()  # what Redis holds from here on is exactly what gets queued below
    deadline = max(datetime.fromisoformat(item["latest_build"]["deadline"]) for item in workspaces)
    with app.app_context():
        report = run_tick(deadline + timedelta(minutes=1))
        db.session.remove()
    assert sorted(report.queued) == sorted((item["id"], "autostop") for item in workspaces)
    stop = fleet.client.post(
        f"/api/v2/workspaces/{mine['id']}/builds", json={"transition": "stop"}, headers=fleet.carol.auth
    )
    assert stop.status_code == 201, stop.json
    person_job = stop.json["job"]
    assert person_job["priority"] == "high"

    listed = fleet.client.get("/api/v2/provisionerjobs?status=pending&limit=100", headers=fleet.admin.auth)
    assert listed.status_code == 200, listed.json
    pending = {item["id"]: item for item in listed.json}
    assert pending[person_job["id"]]["queue_position"] == 1
    low = [item for item in pending.values() if item["id"] != person_job["id"]]
    assert len(low) == FLOOD and {item["priority"] for item in low} == {"low"}
    assert sorted(item["queue_position"] for item in low) == list(range(2, FLOOD + 2))

    sign_in(fleet.client, fleet.admin.email, PASSWORD)
    page = fleet.client.get("/provisioners")
    assert page.status_code == 200
    # The head of the queue, in the order daemons take it: the person's build first, then automatic ones.
    html = page.get_data(as_text=True)
    pending_table = html.split('id="pending-jobs"', 1)[1].split("</table>", 1)[0]
    assert pending_table.index(person_job["id"]) < pending_table.index('title="Queued by the lifecycle executor')
    assert pending_table.count('title="Queued by the lifecycle executor') == 24
    assert f"The first 25 of {FLOOD + 1} waiting jobs" in html

    # An RQ worker takes the first job of the first of its queues that has one.
    queues = [
        Queue(name, connection=get_redis_of(app), serializer=JSONSerializer)
        for name in daemon_queue_names(fleet.daemon.tags, UNTAGGED_ANY)
    ]
    first = Queue.dequeue_any(queues, None, connection=get_redis_of(app), serializer=JSONSerializer)
    assert first is not None and first[0].id == person_job["id"]

    # A daemon waiting over HTTP is offered it too, and the automatic builds after it, oldest first.
    offer = fleet.daemon.call("/jobs/wait", {"timeout_seconds": 0})
    assert offer.status_code == 200 and offer.json["job_id"] == person_job["id"], offer.json
    fleet.finish(person_job["id"])
    oldest_low = min(low, key=lambda item: (item["created_at"], item["id"]))
    offer = fleet.daemon.call("/jobs/wait", {"timeout_seconds": 0})
    assert offer.status_code == 200 and offer.json["job_id"] == oldest_low["id"], offer.json
    assert fleet.job(oldest_low["id"])["priority"] == "low"
