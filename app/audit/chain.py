"""The hash chain: appending entries under the chain head's row lock, verifying the chain, and pruning old ranges
behind a checkpoint (``--audit-retention``).

Entry n's hash is SHA-256 over its content and entry n-1's hash, so changing, inserting or deleting an entry by
hand breaks the chain at that entry. Appending locks the single head row first (held until the transaction ends),
so two transactions can never chain onto the same predecessor: on PostgreSQL one statement locks, chains and
inserts (the hashes computed in SQL); on SQLite an UPDATE of the head takes the database's write lock first."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, text, update

from app.audit.models import CHAIN_HEAD_ID, AuditChainHead, AuditLog
from app.core.columns import utcnow
from protocol.codec import JsonObject

# One verification reads this many entries per query (a keyset walk: memory stays flat at any size).
VERIFY_BATCH = 20_000
# The retention entry's resource and action: what verification looks for to trust the head's checkpoint.
PRUNE_RESOURCE = "audit_log"
PRUNE_ACTION = "prune"
_SEPARATOR = "\x1e"
# Up to this many entries a transaction are chained by PostgreSQL in one statement (each step of its recursive CTE
# scans the transaction's entries, so the cost grows with the square); a bulk change with more goes the Python way.
SQL_CHAIN_MAX_ENTRIES = 200
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# {field: {"old": …, "new": …, "secret": bool}}
Diff = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class PendingEntry:
    """An entry before the chain gives it its id, time and hashes."""

    actor_kind: str
    user_id: str | None
    username: str
    ip: str
    user_agent: str
    resource_type: str
    resource_id: str
    resource_name: str
    action: str
    diff: Diff = field(default_factory=dict)
    build_reason: str | None = None
    status_code: int = 200


def canonical_diff(diff: Diff) -> str:
    return json.dumps(diff, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entry_hash(
    id_: int, time: datetime, actor_kind: str, user_id: str | None, username: str, ip: str, user_agent: str,
    resource_type: str, resource_id: str, resource_name: str, action: str, build_reason: str | None,
    status_code: int, diff: str, prev_hash: str,
) -> str:  # fmt: skip
    """The hash of an entry's stored content and its predecessor's hash (every column but ``hash`` itself)."""
    return _digest(
        id_, _micros(time), actor_kind, user_id, username, ip, user_agent, resource_type, resource_id,
        resource_name, action, build_reason, status_code, diff, prev_hash,
    )  # fmt: skip


def _digest(
    id_: int, micros: int, actor_kind: str, user_id: str | None, username: str, ip: str, user_agent: str,
    resource_type: str, resource_id: str, resource_name: str, action: str, build_reason: str | None,
    status_code: int, diff: str, prev_hash: str,
) -> str:  # fmt: skip
    content = _SEPARATOR.join(
        (
            str(id_), str(micros), actor_kind, user_id or "", username, ip, user_agent, resource_type, resource_id,
            resource_name, action, build_reason or "", str(status_code), diff, prev_hash,
        )
    )  # fmt: skip
    return hashlib.sha256(content.encode()).hexdigest()


def _micros(time: datetime | str) -> int:
    """A time as whole microseconds since 1970 (exact): from a datetime, or from SQLite's stored text (UTC, with no
    zone), which verification reads as it is rather than through the column type (a third of its time)."""
    if isinstance(time, str):
        time = datetime.fromisoformat(time)
    if time.tzinfo is None:
        time = time.replace(tzinfo=UTC)
    return (time - EPOCH) // MICROSECOND


def _bounded(value: str, size: int) -> str:
    return value[:size]


def append(connection: Connection, entries: Sequence[PendingEntry]) -> None:
    """Chain ``entries`` after the head, in the caller's transaction (the change and its entries commit together
    or not at all)."""
    if not entries:
        return
    if connection.dialect.name == "postgresql" and len(entries) <= SQL_CHAIN_MAX_ENTRIES:
        _append_in_sql(connection, entries)
    else:
        _append_in_python(connection, entries)


def _columns(entry: PendingEntry) -> tuple[object, ...]:
    """An entry's stored content but its place in the chain (id, time, hashes), bounded to its columns."""
    return (
        entry.actor_kind, entry.user_id, _bounded(entry.username, 64), _bounded(entry.ip, 64),
        _bounded(entry.user_agent, 256), _bounded(entry.resource_type, 32), _bounded(entry.resource_id, 64),
        _bounded(entry.resource_name, 256), entry.action, entry.build_reason, entry.status_code,
        canonical_diff(entry.diff),
    )  # fmt: skip


_CONTENT = (
    "actor_kind", "user_id", "username", "ip", "user_agent", "resource_type", "resource_id", "resource_name",
    "action", "build_reason", "status_code", "diff",
)  # fmt: skip


def _sql_body(prefix: str) -> str:
    """The SQL twin of :func:`_digest`'s content but the predecessor's hash, over the columns of ``prefix`` (an
    entry with its id and time): the same fields, separator, '' for NULL."""
    fields = [
        f"{prefix}.id::text",
        f"(extract(epoch FROM {prefix}.time) * 1000000)::bigint::text",
        *(f"coalesce({prefix}.{name}::text, '')" for name in _CONTENT),
    ]
    return " || chr(30) || ".join(fields)


def _sql_hash(body: str, prev_hash: str) -> str:
    """SHA-256 in lower-case hex over the UTF-8 of ``body``, the separator and ``prev_hash``, as :func:`_digest`."""
    return f"encode(sha256(convert_to({body} || chr(30) || {prev_hash}, 'UTF8')), 'hex')"


# PostgreSQL: the whole append in one statement, hence one round trip (the head's lock, the ids, the time, every
# entry's hash, the INSERT and the head's move). Before, the head's UPDATE had to come back to Python for the hashes
# to chain onto, which cost a second round trip; now the database chains them with sha256() (the same content as
# :func:`_digest`, which verification recomputes in Python). The entries travel as one array per column, so the
# text is the same for any number of entries: compiled once, and its plan kept by the server.
#  - ``locked`` takes the head's row lock (FOR UPDATE: after a wait it reads the row as the other writer left it;
#    MATERIALIZED: never folded into a query that could take the time before the lock);
#  - ``stamp`` takes the time once, after the lock (``locked`` is read first), so ids and times rise together;
#  - ``chain`` hashes entry n onto entry n-1 (a recursive CTE: each hash needs the one before), over each entry's
#    content joined once beforehand (``bodies``), so the recursion only hashes;
#  - the final UPDATE moves the head once (PostgreSQL cannot update one row twice in one statement).
_ARRAYS = ", ".join(f"CAST(:{name} AS {'integer' if name == 'status_code' else 'text'}[])" for name in _CONTENT)
_NAMES = ", ".join(_CONTENT)
_APPEND_SQL = text(
    f"""
WITH RECURSIVE
locked AS MATERIALIZED (SELECT last_seq, last_hash FROM audit_chain_head WHERE id = {CHAIN_HEAD_ID} FOR UPDATE),
stamp AS (SELECT last_seq, last_hash::text AS last_hash, clock_timestamp() AS time FROM locked),
pending AS (
    SELECT e.*, stamp.last_seq + e.n AS id, stamp.time
    FROM stamp CROSS JOIN unnest({_ARRAYS}) WITH ORDINALITY AS e({_NAMES}, n)
),
bodies AS (SELECT n, {_sql_body("pending")} AS body FROM pending),
chain AS (
    SELECT bodies.n, stamp.last_hash AS prev_hash, {_sql_hash("bodies.body", "stamp.last_hash")} AS hash
    FROM bodies CROSS JOIN stamp WHERE bodies.n = 1
    UNION ALL
    SELECT bodies.n, chain.hash, {_sql_hash("bodies.body", "chain.hash")}
    FROM chain JOIN bodies ON bodies.n = chain.n + 1
),
appended AS (
    INSERT INTO audit_logs (id, time, {_NAMES}, prev_hash, hash)
    SELECT pending.id, pending.time, {", ".join(f"pending.{name}" for name in _CONTENT)}, chain.prev_hash, chain.hash
    FROM pending JOIN chain ON chain.n = pending.n
)
UPDATE audit_chain_head SET last_seq = stamp.last_seq + :count, last_hash = chain.hash
FROM chain CROSS JOIN stamp WHERE audit_chain_head.id = {CHAIN_HEAD_ID} AND chain.n = :count
"""  # noqa: S608 - our own column names
)


# One entry (most transactions: a setting, a version, a token) needs no recursion nor arrays: a plainer statement,
# which matters because PostgreSQL parses and plans it on every execution (psycopg's prepared statements do not
# outlive the ROLLBACK that ends each request's read transaction), and planning is most of its cost.
_SCALARS = ", ".join(
    f"CAST(:{name} AS {'integer' if name == 'status_code' else 'text'}) AS {name}" for name in _CONTENT
)
_APPEND_ONE_SQL = text(
    f"""
WITH
locked AS MATERIALIZED (SELECT last_seq, last_hash FROM audit_chain_head WHERE id = {CHAIN_HEAD_ID} FOR UPDATE),
entry AS (
    SELECT locked.last_seq + 1 AS id, clock_timestamp() AS time, {_SCALARS}, locked.last_hash::text AS prev_hash
    FROM locked
),
chain AS (SELECT entry.*, {_sql_hash(_sql_body("entry"), "entry.prev_hash")} AS hash FROM entry),
appended AS (
    INSERT INTO audit_logs (id, time, {_NAMES}, prev_hash, hash)
    SELECT id, time, {_NAMES}, prev_hash, hash FROM chain
)
UPDATE audit_chain_head SET last_seq = chain.id, last_hash = chain.hash
FROM chain WHERE audit_chain_head.id = {CHAIN_HEAD_ID}
"""  # noqa: S608 - our own column names
)


def _append_in_sql(connection: Connection, entries: Sequence[PendingEntry]) -> None:
    if len(entries) == 1:
        result = connection.execute(_APPEND_ONE_SQL, dict(zip(_CONTENT, _columns(entries[0]), strict=True)))
    else:
        result = connection.execute(_APPEND_SQL, _arrays(entries))
    if result.rowcount != 1:  # the head row is gone: a broken database, never a silent loss of entries
        raise RuntimeError("the audit chain's head is missing")


def _arrays(entries: Sequence[PendingEntry]) -> dict[str, object]:
    columns = list(zip(*(_columns(entry) for entry in entries), strict=True))
    parameters: dict[str, object] = {name: list(values) for name, values in zip(_CONTENT, columns, strict=True)}
    parameters["count"] = len(entries)
    return parameters


def _append_in_python(connection: Connection, entries: Sequence[PendingEntry]) -> None:
    """SQLite (in process: a statement costs no round trip), and a bulk change's many entries: the head's UPDATE
    comes first, as the lock, and what it returns is read under it; the hashes are computed here."""
    head = connection.execute(
        update(AuditChainHead)
        .where(AuditChainHead.id == CHAIN_HEAD_ID)
        .values(last_seq=AuditChainHead.last_seq + len(entries))
        .returning(AuditChainHead.last_seq, AuditChainHead.last_hash)
    ).one()
    # Taken under the lock, so that ids and times rise together (a date filter becomes an id range).
    now = utcnow()
    prev_hash, first_id = head.last_hash, head.last_seq - len(entries) + 1
    rows = []
    for offset, entry in enumerate(entries):
        row: dict[str, Any] = {"id": first_id + offset, "time": now}
        row.update(zip(_CONTENT, _columns(entry), strict=True))
        row["prev_hash"] = prev_hash
        row["hash"] = prev_hash = entry_hash(**{("id_" if key == "id" else key): value for key, value in row.items()})
        rows.append(row)
    connection.execute(insert(AuditLog), rows)
    connection.execute(update(AuditChainHead).where(AuditChainHead.id == CHAIN_HEAD_ID).values(last_hash=prev_hash))


@dataclass(frozen=True)
class Verification:
    """What ``slipway audit verify`` and the Health page report: the first entry where the chain breaks."""

    ok: bool
    checked: int
    first_entry: int | None = None
    last_entry: int | None = None
    broken_at: int | None = None
    reason: str = ""

    def to_json(self) -> JsonObject:
        return {
            "ok": self.ok, "checked": self.checked, "first_entry": self.first_entry, "last_entry": self.last_entry,
            "broken_at": self.broken_at, "reason": self.reason,
        }  # fmt: skip


def _rows(connection: Connection) -> Iterator[Any]:
    """Every entry in chain order, a batch per query, as the driver's plain tuples (no result processing: most of
    a verification's time otherwise); ``time`` as the driver gives it (see :func:`_micros`)."""
    names = ", ".join(column.name for column in AuditLog.__table__.columns)
    marker = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    statement = f"SELECT {names} FROM audit_logs WHERE id > {marker} ORDER BY id LIMIT {VERIFY_BATCH}"  # noqa: S608 - our own column names
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        after = -1
        while True:
            cursor.execute(statement, (after,))
            batch = cursor.fetchall()
            if not batch:
                return
            yield from batch
            after = batch[-1][0]
    finally:
        cursor.close()


def verify(connection: Connection) -> Verification:
    """Walk the chain from the retention checkpoint to the head; stop at the first entry that was changed, is
    missing, or does not follow its predecessor."""
    head = connection.execute(select(AuditChainHead).where(AuditChainHead.id == CHAIN_HEAD_ID)).one()
    expected_id, prev_hash, checked, first = head.base_seq + 1, head.base_hash, 0, None
    prune_seen = head.base_seq == 0
    for row in _rows(connection):
        (id_, time, actor_kind, user_id, username, ip, user_agent, resource_type, resource_id, resource_name,
         action, build_reason, status_code, diff, stored_prev, stored_hash) = row  # fmt: skip
        first = id_ if first is None else first
        if id_ != expected_id:
            missing = expected_id if id_ > expected_id else id_
            return Verification(False, checked, first, id_, missing, f"entry {missing} is missing")
        if stored_prev != prev_hash:
            return Verification(False, checked, first, id_, id_, f"entry {id_} does not follow entry {id_ - 1}")
        computed = _digest(
            id_, _micros(time), actor_kind, user_id, username, ip, user_agent, resource_type, resource_id,
            resource_name, action, build_reason, status_code, diff, stored_prev,
        )  # fmt: skip
        if computed != stored_hash:
            return Verification(False, checked, first, id_, id_, f"entry {id_} was changed")
        if resource_type == PRUNE_RESOURCE and action == PRUNE_ACTION:
            prune_seen = prune_seen or _names_checkpoint(diff, head.base_seq, head.base_hash)
        checked, expected_id, prev_hash = checked + 1, id_ + 1, stored_hash
    if expected_id - 1 != head.last_seq or prev_hash != head.last_hash:
        missing = expected_id if expected_id <= head.last_seq else head.last_seq
        return Verification(False, checked, first, expected_id - 1, missing, f"entry {missing} is missing")
    if not prune_seen:
        return Verification(
            False, checked, first, expected_id - 1, head.base_seq + 1,
            "the retention checkpoint was not recorded in the chain (entries removed by hand?)",
        )  # fmt: skip
    return Verification(True, checked, first, expected_id - 1 if checked else None)


def _names_checkpoint(diff: str, base_seq: int, base_hash: str) -> bool:
    fields = json.loads(diff)
    return bool(
        fields.get("pruned_through", {}).get("new") == base_seq
        and fields.get("checkpoint_hash", {}).get("new") == base_hash
    )


def prune_before(connection: Connection, cutoff: datetime) -> tuple[int, str] | None:
    """Remove every entry older than ``cutoff`` (a whole range from the start) and move the checkpoint to the last
    one removed. Returns (last removed id, its hash), or None when nothing is old enough. The caller records the
    prune as an entry in the same transaction, which is how verification knows the checkpoint is genuine."""
    # Lock the head first, as an append does: no entry is chained while its predecessors are being removed.
    head = connection.execute(
        update(AuditChainHead)
        .where(AuditChainHead.id == CHAIN_HEAD_ID)
        .values(last_seq=AuditChainHead.last_seq)
        .returning(AuditChainHead.base_seq)
    ).one()
    through = connection.execute(select(func.max(AuditLog.id)).where(AuditLog.time < cutoff)).scalar()
    if through is None or through <= head.base_seq:
        return None
    checkpoint = connection.execute(select(AuditLog.hash).where(AuditLog.id == through)).scalar_one()
    connection.execute(delete(AuditLog).where(AuditLog.id <= through))
    connection.execute(
        update(AuditChainHead).where(AuditChainHead.id == CHAIN_HEAD_ID).values(base_seq=through, base_hash=checkpoint)
    )
    return int(through), str(checkpoint)
