"""``GET /api/v2/audit?q=``: Coder's filter (``resource_type:`` ``resource_id:`` ``action:`` ``username:``
``date_from:`` ``date_to:`` ``build_reason:``), newest first, paged by keyset (``before=<id>``) so that page 1,000
costs what page 1 does. Every filter is served by an index ending in ``id``; dates become an id range (ids and
times rise together: both are taken under the chain head's lock), found through the index on ``time``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, select

from app.audit.models import AuditLog
from app.core.columns import rfc3339
from app.core.errors import InvalidInput
from app.core.extensions import db
from protocol.codec import JsonObject

FILTER_KEYS = ("resource_type", "resource_id", "action", "username", "date_from", "date_to", "build_reason")
_EXACT = {
    "resource_type": AuditLog.resource_type,
    "resource_id": AuditLog.resource_id,
    "action": AuditLog.action,
    "username": AuditLog.username,
    "build_reason": AuditLog.build_reason,
}
_VALUE = re.compile(r"^[\w.:@/-]{1,128}$")
DEFAULT_LIMIT = 25
MAX_LIMIT = 1000
EXPORT_BATCH = 5000


@dataclass(frozen=True)
class AuditFilter:
    exact: tuple[tuple[str, str], ...] = ()
    date_from: date | None = None
    date_to: date | None = None


def parse_filter(q: str) -> AuditFilter:
    """``key:value`` terms separated by spaces; an unknown key or a malformed value is a 400 that names it."""
    exact: dict[str, str] = {}
    dates: dict[str, date] = {}
    for term in q.split():
        key, sep, value = term.partition(":")
        if not sep or key not in FILTER_KEYS:
            raise InvalidInput(f"Unknown audit filter {term!r}: use {', '.join(k + ':' for k in FILTER_KEYS)}.")
        if key.startswith("date_"):
            try:
                dates[key] = date.fromisoformat(value)
            except ValueError:
                raise InvalidInput(f"{key}: wants a date as YYYY-MM-DD, not {value!r}.") from None
        elif not _VALUE.match(value):
            raise InvalidInput(f"{key}: {value!r} is not a value this filter takes.")
        else:
            exact[key] = value
    return AuditFilter(tuple(sorted(exact.items())), dates.get("date_from"), dates.get("date_to"))


def _day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def first_on_or_after(day: date) -> Select[int]:
    """The first entry of ``day`` or later (ids and times rise together), read off the (time, id) index."""
    start = _day_start(day)
    return select(AuditLog.id).where(AuditLog.time >= start).order_by(AuditLog.time, AuditLog.id).limit(1)


def last_through(day: date) -> Select[int]:
    """The last entry up to the end of ``day``, read off the same index backwards."""
    end = _day_start(day) + timedelta(days=1)
    return select(AuditLog.id).where(AuditLog.time < end).order_by(AuditLog.time.desc(), AuditLog.id.desc()).limit(1)


def _criteria(wanted: AuditFilter) -> list[ColumnElement[bool]]:
    criteria = [_EXACT[key] == value for key, value in wanted.exact]
    if wanted.date_from is not None:
        first = db.session.scalar(first_on_or_after(wanted.date_from))
        criteria.append(AuditLog.id >= (first if first is not None else 2**62))
    if wanted.date_to is not None:
        last = db.session.scalar(last_through(wanted.date_to))
        criteria.append(AuditLog.id <= (last if last is not None else 0))
    return criteria


def filtered(wanted: AuditFilter) -> Select[Any]:
    return select(AuditLog).where(*_criteria(wanted)).order_by(AuditLog.id.desc())


@dataclass(frozen=True)
class AuditPage:
    entries: list[AuditLog]
    # The ``before`` of the next (older) page; None on the last page.
    next_before: int | None


def page(wanted: AuditFilter, *, limit: int = DEFAULT_LIMIT, before: int | None = None) -> AuditPage:
    query = filtered(wanted)
    if before is not None:
        query = query.where(AuditLog.id < before)
    rows = list(db.session.scalars(query.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return AuditPage(rows, rows[-1].id if more and rows else None)


def every(wanted: AuditFilter) -> Iterator[AuditLog]:
    """Every matching entry, newest first, a batch per query (an export of any size in flat memory)."""
    before: int | None = None
    while True:
        batch = page(wanted, limit=EXPORT_BATCH, before=before)
        yield from batch.entries
        if batch.next_before is None:
            return
        before = batch.next_before
        db.session.expunge_all()


def entry_json(entry: AuditLog) -> JsonObject:
    """One entry in Coder's shape (``audit_logs[]``), plus the chain's hashes."""
    return {
        "id": entry.id,
        "time": rfc3339(entry.time),
        "user": {"id": entry.user_id, "username": entry.username} if entry.user_id else None,
        "actor": {"kind": entry.actor_kind, "name": entry.username},
        "ip": entry.ip,
        "user_agent": entry.user_agent,
        "resource_type": entry.resource_type,
        "resource_id": entry.resource_id,
        "resource_target": entry.resource_name,
        "action": entry.action,
        "build_reason": entry.build_reason,
        "status_code": entry.status_code,
        "diff": json.loads(entry.diff),
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
    }


CSV_COLUMNS = (
    "id", "time", "actor_kind", "username", "user_id", "ip", "user_agent", "resource_type", "resource_id",
    "resource_target", "action", "build_reason", "status_code", "diff", "prev_hash", "hash",
)  # fmt: skip


def csv_row(entry: AuditLog) -> list[object]:
    return [
        entry.id, rfc3339(entry.time), entry.actor_kind, entry.username, entry.user_id or "", entry.ip,
        entry.user_agent, entry.resource_type, entry.resource_id, entry.resource_name, entry.action,
        entry.build_reason or "", entry.status_code, entry.diff, entry.prev_hash, entry.hash,
    ]  # fmt: skip
