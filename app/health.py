"""``GET /healthz``: plain ``OK`` when the database and Redis answer and the data dir's disk has room, 503 naming
the failing part otherwise."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app
from sqlalchemy import text

from app.core.config import Settings, draining_marker
from app.core.disk import MIN_FREE_BYTES, disk_space
from app.core.extensions import db
from app.core.redis_client import get_redis
from protocol.values import format_size

log = logging.getLogger(__name__)
bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    # Readiness fails first when the replica is told to stop: the load balancer takes it out while it still serves.
    if draining_marker(settings.data_dir).exists():
        return Response("unhealthy: draining (this replica is stopping)\n", 503, mimetype="text/plain")
    failing = []
    try:
        db.session.execute(text("SELECT 1"))
    except Exception:  # any failure means "not healthy"; the reason goes to the log, not to the prober
        log.warning("health check: database did not answer", exc_info=True)
        failing.append("database")
    finally:
        db.session.rollback()
    try:
        get_redis().ping()
    except Exception:
        log.warning("health check: redis did not answer", exc_info=True)
        failing.append("redis")
    problems = [f"{', '.join(failing)} not answering"] if failing else []
    try:
        free, _ = disk_space(settings.data_dir)
    except OSError:
        log.warning("health check: cannot read the data dir's disk space", exc_info=True)
        problems.append("data dir unreadable")
    else:
        if free < MIN_FREE_BYTES:
            problems.append(f"disk full ({format_size(free)} free under the data dir)")
    if problems:
        return Response(f"unhealthy: {'; '.join(problems)}\n", 503, mimetype="text/plain")
    return Response("OK\n", 200, mimetype="text/plain")
