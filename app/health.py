"""``GET /healthz``: plain ``OK`` when the database and Redis answer, 503 naming the failing part otherwise."""

from __future__ import annotations

import logging

from flask import Blueprint, Response
from sqlalchemy import text

from app.core.extensions import db
from app.core.redis_client import get_redis

log = logging.getLogger(__name__)
bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
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
    if failing:
        return Response(f"unhealthy: {', '.join(failing)} not answering\n", 503, mimetype="text/plain")
    return Response("OK\n", 200, mimetype="text/plain")
