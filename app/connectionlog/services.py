"""Writing the connection log. Tunnels (SSH, terminals, port forwards) are one row each, opened when the agent
answers and ended when the relay stops; an app is one row per viewer (person, address and browser) and app, kept
open while requests keep coming (``APP_SESSION_IDLE``), so the log says "Ann used the IDE from 9 to 12", not one
line per request. Rows left open by a replica that died are ended by :func:`end_lost` (the sweep)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from sqlalchemy import delete, or_, select, update

from app.catalog.models import Template
from app.connectionlog.models import (
    REASON_LOST,
    REASON_TIMED_OUT,
    VIA_HTTP,
    VIA_TUNNEL,
    ConnectionLog,
)
from app.core.columns import new_id, utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.users.models import User
from app.workspaces.models import Workspace

# An app session ends when no request came for this long (ended at its last request).
APP_SESSION_IDLE = timedelta(minutes=15)
# An open app session's last request is written at most this often (not once per request).
SEEN_EVERY = timedelta(seconds=60)
APP_SESSION_KEY_PREFIX = "slipway:connlog:app:"
MAX_USER_AGENT = 512
# Retention removes ended rows this many at a time, each batch its own short transaction (a year of connections
# is millions of rows: one DELETE of them all would hold its locks and grow the WAL for minutes), and at most
# PRUNE_BATCHES batches per maintenance pass (the loop's other tasks wait behind it; the next pass goes on).
PRUNE_BATCH = 5_000
PRUNE_BATCHES = 100


@dataclass(frozen=True)
class Origin:
    """Where a connection came from."""

    ip: str
    user_agent: str


@dataclass(frozen=True)
class Way:
    """Which way in: a connection type, the agent, and the app's slug or the port ("" for SSH and terminals)."""

    type: str
    agent_name: str
    slug_or_port: str = ""
    via: str = VIA_TUNNEL


def open_connection(
    user: User | None, workspace: Workspace, way: Way, origin: Origin, row_id: str | None = None
) -> str:
    """Insert the row of a connection that has just opened (and commit it); its id."""
    template = db.session.get(Template, workspace.template_id)
    owner = db.session.get(User, workspace.owner_id)
    row = ConnectionLog(
        id=row_id or new_id(),
        type=way.type,
        via=way.via,
        user_id=user.id if user is not None else None,
        username=user.username if user is not None else "",
        organization_id=template.organization_id if template is not None else "",
        workspace_id=workspace.id,
        workspace_name=workspace.name,
        workspace_owner_id=workspace.owner_id,
        workspace_owner_username=owner.username if owner is not None else "",
        template_id=workspace.template_id,
        agent_name=way.agent_name,
        slug_or_port=way.slug_or_port[:64],
        ip=origin.ip[:64],
        user_agent=origin.user_agent[:MAX_USER_AGENT],
    )
    db.session.add(row)
    db.session.commit()
    return row.id


def end_connection(row_id: str, reason: str, at: datetime | None = None) -> bool:
    """End the row, unless something ended it already; a sweep's guess that it was lost (its holder looked dead)
    gives way to the holder's own word. True when this call ended it."""
    result = db.session.execute(
        update(ConnectionLog)
        .where(
            ConnectionLog.id == row_id,
            or_(ConnectionLog.disconnect_time.is_(None), ConnectionLog.disconnect_reason == REASON_LOST),
        )
        .values(disconnect_time=at or utcnow(), disconnect_reason=reason)
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    return bool(getattr(result, "rowcount", 0))


def end_many(row_ids: Iterable[str], reason: str) -> int:
    return sum(end_connection(row_id, reason) for row_id in row_ids)


def open_tunnel_rows(opened_before: datetime) -> list[ConnectionLog]:
    """Open tunnel rows older than ``opened_before``: those the sweep checks for a live holder."""
    query = select(ConnectionLog).where(
        ConnectionLog.disconnect_time.is_(None),
        ConnectionLog.via == VIA_TUNNEL,
        ConnectionLog.connect_time < opened_before,
    )
    return list(db.session.scalars(query))


def open_rows(
    *, workspace_id: str | None = None, user_id: str | None = None, via: str | None = None
) -> list[ConnectionLog]:
    query = select(ConnectionLog).where(ConnectionLog.disconnect_time.is_(None))
    if workspace_id is not None:
        query = query.where(ConnectionLog.workspace_id == workspace_id)
    if user_id is not None:
        query = query.where(ConnectionLog.user_id == user_id)
    if via is not None:
        query = query.where(ConnectionLog.via == via)
    return list(db.session.scalars(query))


def app_session_key(user: User | None, origin: Origin, app_key: str) -> str:
    """One session per viewer and app: the person (or, signed out, nobody), their address and browser."""
    viewer = "\0".join((user.id if user is not None else "", origin.ip, origin.user_agent, app_key))
    return APP_SESSION_KEY_PREFIX + hashlib.sha256(viewer.encode()).hexdigest()


def touch_app_session(
    client: redis.Redis, user: User | None, workspace: Workspace, way: Way, origin: Origin, app_key: str
) -> str:
    """Called on each app request: open the viewer's session of this app, or keep it open. Redis names the open
    session (so concurrent first requests open one row); the database is written on the first request and then
    at most every ``SEEN_EVERY``. The row's id."""
    key = app_session_key(user, origin, app_key)
    idle = int(APP_SESSION_IDLE.total_seconds())
    candidate = new_id()
    seen_every = int(SEEN_EVERY.total_seconds())
    # One round trip for what every request asks (this runs before the app's first byte): open the session or
    # learn its row and keep it open, and whether the row is due to be marked seen. "seen" is set before any row
    # is inserted: a request that comes while the row is being inserted must not look for it yet.
    pipe = client.pipeline(transaction=False)
    pipe.set(key, candidate, nx=True, ex=idle)
    pipe.get(key)
    pipe.expire(key, idle)
    pipe.set(f"{key}:seen", b"1", nx=True, ex=seen_every)
    opened, existing, _, due = pipe.execute()
    if opened:
        return open_connection(user, workspace, way, origin, candidate)
    row_id = existing.decode() if isinstance(existing, bytes) else str(existing or "")
    if not due:
        return row_id
    seen = db.session.execute(
        update(ConnectionLog)
        .where(ConnectionLog.id == row_id, ConnectionLog.disconnect_time.is_(None))
        .values(last_seen_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    if getattr(seen, "rowcount", 0):
        return row_id
    # Ended meanwhile (access removed, workspace stopped): this request starts a new session.
    client.set(key, candidate, ex=idle)
    return open_connection(user, workspace, way, origin, candidate)


def end_idle_app_sessions(now: datetime | None = None) -> int:
    """App sessions with no request for ``APP_SESSION_IDLE`` end, at their last request, as timed out."""
    cutoff = (now or utcnow()) - APP_SESSION_IDLE - SEEN_EVERY
    idle = db.session.scalars(
        select(ConnectionLog).where(
            ConnectionLog.disconnect_time.is_(None),
            ConnectionLog.via == VIA_HTTP,
            ConnectionLog.last_seen_at < cutoff,
        )
    ).all()
    return sum(end_connection(row.id, REASON_TIMED_OUT, at=row.last_seen_at) for row in idle)


def prune_old_connections(settings: Settings, now: datetime | None = None) -> int:
    """A maintenance task: the connection log is kept as long as the audit log (``--audit-retention``), so remove
    the connections that ended before that period; open ones stay however old. Returns how many went."""
    if not settings.audit_retention:
        return 0
    cutoff = (now or utcnow()) - timedelta(seconds=settings.audit_retention)
    removed = 0
    for _ in range(PRUNE_BATCHES):
        # By id through the disconnect_time index: a bounded DELETE that both databases take (neither SQLite
        # nor PostgreSQL has DELETE … LIMIT by default).
        batch = select(ConnectionLog.id).where(ConnectionLog.disconnect_time < cutoff).limit(PRUNE_BATCH)
        result = db.session.execute(
            delete(ConnectionLog).where(ConnectionLog.id.in_(batch.scalar_subquery())),
            execution_options={"synchronize_session": False},
        )
        db.session.commit()
        count = int(getattr(result, "rowcount", 0) or 0)
        removed += count
        if count < PRUNE_BATCH:
            break
    return removed
