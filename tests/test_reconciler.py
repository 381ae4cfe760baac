"""The reconciler puts back the queue entries Redis lost, in one query and one Redis round trip however many jobs
wait (it runs every 10 s on every replica)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from rq.job import Job
from sqlalchemy import update

from app.core.columns import utcnow
from app.core.extensions import db
from app.provisioning.maintenance import reconcile_queues
from app.provisioning.models import ProvisionerJob
from tests.conftest import Persona, get_redis_of
from tests.support.daemon import push_version
from tests.support.queries import counted

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _pending(app: Flask, client: FlaskClient, personas: dict[str, Persona], count: int) -> list[str]:
    ids = [push_version(client, personas["bob"])["job"]["id"] for _ in range(count)]
    with app.app_context():  # older than the grace a just-created job gets
        db.session.execute(update(ProvisionerJob).values(created_at=utcnow() - timedelta(minutes=1)))
        db.session.commit()
    return ids


def test_lost_and_ended_entries_are_put_back_and_nothing_else(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    lost, ended, kept = _pending(app, client, personas, 3)
    connection = get_redis_of(app)
    connection.delete(Job.key_for(lost))  # Redis restarted without it
    connection.hset(Job.key_for(ended), "status", "failed")  # a daemon died holding the entry
    with app.app_context():
        assert reconcile_queues() == 2
        assert connection.hget(Job.key_for(lost), "status") == b"queued"
        assert connection.hget(Job.key_for(ended), "status") == b"queued"
        assert reconcile_queues() == 0
    assert connection.hget(Job.key_for(kept), "status") == b"queued"


def test_its_cost_does_not_grow_with_the_pending_jobs(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self: redis.connection.AbstractConnection, command: Any, check_health: bool = True) -> None:
        sent.append(1)  # one write to the socket: a command, or a whole pipeline
        send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)

    def cost() -> tuple[int, int]:
        sent.clear()
        with counted(app) as statements, app.app_context():
            reconcile_queues()
        return len(statements), len(sent)

    _pending(app, client, personas, 2)
    few = cost()
    _pending(app, client, personas, 20)
    assert cost() == few == (1, 1)
