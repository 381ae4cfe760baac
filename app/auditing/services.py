"""What the API, the page, the CLI and the maintenance loop ask of the audit log."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime, timedelta

from app.audit import query
from app.audit.chain import PRUNE_ACTION, PRUNE_RESOURCE, Verification, append, prune_before, verify
from app.audit.recorder import Actor, acting_as, change, pending
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db

RETENTION_ACTOR = Actor("system", None, "audit-retention")
EXPORT_FORMATS = ("csv", "ndjson")


def verify_chain() -> Verification:
    try:
        return verify(db.session.connection())
    finally:
        db.session.rollback()


def prune_old_entries(settings: Settings, now: datetime | None = None) -> int | None:
    """A maintenance task (``--audit-retention``): remove the entries older than the retention period and record
    the checkpoint as an entry of its own, in one transaction. Returns the last id removed, or None."""
    if not settings.audit_retention:
        return None
    connection = db.session.connection()
    pruned = prune_before(connection, (now or utcnow()) - timedelta(seconds=settings.audit_retention))
    if pruned is None:
        db.session.rollback()
        return None
    through, checkpoint = pruned
    diff = {"pruned_through": change(through), "checkpoint_hash": change(checkpoint)}
    with acting_as(RETENTION_ACTOR):
        append(connection, [pending(PRUNE_RESOURCE, str(through), "", PRUNE_ACTION, diff)])
    db.session.commit()
    return through


def export_lines(wanted: query.AuditFilter, fmt: str) -> Iterator[str]:
    """The matching entries as CSV (a header, then a row each) or NDJSON (an object a line), newest first."""
    if fmt == "csv":
        yield _csv_line(list(query.CSV_COLUMNS))
        for entry in query.every(wanted):
            yield _csv_line(query.csv_row(entry))
    else:
        for entry in query.every(wanted):
            yield json.dumps(query.entry_json(entry), separators=(",", ":")) + "\n"
    db.session.remove()


def _csv_line(values: list[object]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(values)
    return buffer.getvalue()
