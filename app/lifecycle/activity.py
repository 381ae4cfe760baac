"""Workspace activity: SSH sessions, port forwards, web terminals and app requests mark a workspace used.

A request only touches Redis (a hash field per workspace); the maintenance loop flushes the hashes into the
database at most once a minute per deployment, in one batched UPDATE, so a busy app costs no row write per request.
Open connections (not app requests, reference §2.4) also push a running workspace's autostop out by its
template's ``activity_bump_ms`` when it is closer than that, never past ``max_deadline``. A connection held for
hours keeps marking the workspace while it is open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from redis import Redis
from sqlalchemy import select, update
from sqlalchemy.orm import joinedload

from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.workspaces.models import Workspace
from app.workspaces.services import build_status, latest_builds

USED_KEY = "slipway:activity:used"
CONNECTED_KEY = "slipway:activity:connected"
FLUSH_GATE_KEY = "slipway:activity:flushed"
# An open connection marks its workspace this often, so a session of hours keeps counting as use.
CONNECTION_REFRESH_SECONDS = 30.0
# An app's requests mark their workspace at most this often per process: the marks are flushed once a minute, and a
# Redis round trip on every request was a measurable part of an app request's time (issue 35's benchmark).
REQUEST_MARK_EVERY_SECONDS = 10.0
_REQUEST_MARKS_KEPT = 10_000
_request_marks: dict[str, float] = {}
_request_marks_lock = threading.Lock()


def mark_used(workspace_id: str, *, connection: bool, connection_to: Redis | None = None) -> None:
    """Record use of the workspace now (a Redis write; never the database)."""
    client = connection_to or get_redis()
    stamp = str(utcnow().timestamp())
    pipe = client.pipeline(transaction=False)
    pipe.hset(USED_KEY, workspace_id, stamp)
    if connection:
        pipe.hset(CONNECTED_KEY, workspace_id, stamp)
    try:
        pipe.execute()
    except Exception:
        return


def mark_requested(workspace_id: str) -> None:
    """An app request: the workspace is used (no autostop bump, reference §2.4), marked at most every
    :data:`REQUEST_MARK_EVERY_SECONDS` by this process."""
    now = time.monotonic()
    with _request_marks_lock:
        if now - _request_marks.get(workspace_id, -REQUEST_MARK_EVERY_SECONDS) < REQUEST_MARK_EVERY_SECONDS:
            return
        if len(_request_marks) >= _REQUEST_MARKS_KEPT:
            _request_marks.clear()
        _request_marks[workspace_id] = now
    mark_used(workspace_id, connection=False)


@contextmanager
def open_connection(workspace_id: str, client: Redis) -> Iterator[None]:
    """Around a connection's life: marks the workspace at once and every half minute until it closes."""
    closed = threading.Event()

    def keep_marking() -> None:
        while True:
            mark_used(workspace_id, connection=True, connection_to=client)
            if closed.wait(CONNECTION_REFRESH_SECONDS):
                return

    marker = threading.Thread(target=keep_marking, name=f"activity-{workspace_id[:8]}", daemon=True)
    marker.start()
    try:
        yield
    finally:
        closed.set()


def _take(client: Redis, key: str) -> dict[str, datetime]:
    """The hash's entries, removed atomically (a mark that lands meanwhile goes to the next flush)."""
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(key)
    pipe.delete(key)
    entries, _ = pipe.execute()
    return {name.decode(): datetime.fromtimestamp(float(value), UTC) for name, value in (entries or {}).items()}


def flush_activity(settings: Settings, now: datetime | None = None) -> int:
    """A maintenance task: write what was marked since the last flush; a no-op until the interval has passed
    (whichever replica's loop runs first does it). Returns the number of workspaces written."""
    client = get_redis()
    if not client.set(FLUSH_GATE_KEY, "1", nx=True, ex=max(1, settings.activity_flush_interval)):
        return 0
    used, connected = _take(client, USED_KEY), _take(client, CONNECTED_KEY)
    if not used:
        return 0
    rows = [{"id": workspace_id, "last_used_at": stamp} for workspace_id, stamp in used.items()]
    # One executemany UPDATE by primary key for all of them; a workspace deleted meanwhile is simply not matched.
    existing = set(db.session.scalars(select(Workspace.id).where(Workspace.id.in_(list(used)))))
    db.session.execute(update(Workspace), [row for row in rows if row["id"] in existing])
    if connected:
        _bump_deadlines(connected, now or utcnow())
    db.session.commit()
    return len(existing)


def _bump_deadlines(connected: dict[str, datetime], now: datetime) -> None:
    workspaces = list(
        db.session.scalars(
            select(Workspace)
            .where(Workspace.id.in_(list(connected)), Workspace.deleted.is_(False))
            .options(joinedload(Workspace.template))
        )
    )
    latest = latest_builds(workspaces)
    for workspace in workspaces:
        build = latest.get(workspace.id)
        bump = timedelta(milliseconds=workspace.template.activity_bump_ms)
        if build is None or not bump or build.deadline is None or build_status(build) != "running":
            continue
        wanted = now + bump
        if build.max_deadline is not None:
            wanted = min(wanted, build.max_deadline)
        if build.deadline < wanted:
            build.deadline = wanted
