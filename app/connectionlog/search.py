"""The connection log's filter (``?q=``), Coder's terms: ``username:ann workspace_owner:bob workspace_id:<id>
type:ssh status:ongoing connected_after:2026-11-01 connected_before:2026-11-28T12:00:00Z``. A bare word is
``username:``. Every term is said in SQL; the newest connection first, served by the connect_time indexes."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Select, func, select

from app.connectionlog.models import TYPES, ConnectionLog
from app.core.columns import parse_rfc3339
from app.core.extensions import db
from app.core.filters import bad_filter, one_of, parse_terms
from app.users.models import User

STATUSES = ("ongoing", "completed")
_EXAMPLES = {
    "username": "ann",
    "workspace_owner": "bob",
    "workspace_id": "<id>",
    "type": "ssh",
    "status": "ongoing",
    "connected_after": "2026-11-01",
    "connected_before": "2026-11-28T12:00:00Z",
}


def log_query(text: str) -> Select[ConnectionLog]:
    """The rows ``text`` asks for, newest first; all of them when it is blank. A term it cannot read is a 400."""
    query = select(ConnectionLog)
    terms = parse_terms(text, _EXAMPLES, bare="username") if text.strip() else {}
    # People by their id (an index serves it, and a renamed person's older rows still count as theirs).
    if "username" in terms:
        query = query.where(ConnectionLog.user_id.in_(_people_named(terms["username"])))
    if "workspace_owner" in terms:
        query = query.where(ConnectionLog.workspace_owner_id.in_(_people_named(terms["workspace_owner"])))
    if "workspace_id" in terms:
        query = query.where(ConnectionLog.workspace_id == terms["workspace_id"])
    kind = one_of(terms, "type", TYPES)
    if kind is not None:
        query = query.where(ConnectionLog.type == kind)
    status = one_of(terms, "status", STATUSES)
    if status == "ongoing":
        query = query.where(ConnectionLog.disconnect_time.is_(None))
    elif status == "completed":
        query = query.where(ConnectionLog.disconnect_time.is_not(None))
    if "connected_after" in terms:
        query = query.where(ConnectionLog.connect_time >= _moment(terms, "connected_after"))
    if "connected_before" in terms:
        query = query.where(ConnectionLog.connect_time < _moment(terms, "connected_before"))
    return query.order_by(ConnectionLog.connect_time.desc(), ConnectionLog.id.desc())


def _people_named(name: str) -> list[str]:
    """The ids of the people so named, read first: a literal list lets the planner walk the (id, connect_time)
    index newest first and stop at a page, where ``IN (SELECT …)`` became a semi-join that read every row of the
    log (or scanned it all for a name nobody has)."""
    return list(db.session.scalars(select(User.id).where(func.lower(User.username) == name.lower())))


def _moment(terms: dict[str, str], key: str) -> datetime:
    """A date (its midnight, UTC) or an RFC 3339 time."""
    value = terms[key]
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        parsed = parse_rfc3339(value)
    if parsed is None:
        raise bad_filter(f"{key}: takes a date (2026-11-01) or a time with its zone (2026-11-01T09:00:00Z).")
    return parsed
