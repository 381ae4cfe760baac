"""PostgreSQL transactions that only read end with COMMIT, so that psycopg keeps its prepared statements.

psycopg prepares a statement once a connection has run it five times, and then PostgreSQL neither parses nor plans
it again: for the dashboard's lists that is most of a statement's cost (planning a filtered workspaces page takes
about 2 ms, running it 1 ms). But psycopg forgets every prepared statement at each ROLLBACK (a rolled-back
transaction may have dropped what they name), and every request ends with one: the session's teardown rolls back
the transaction that the request's reads opened, after its commit if it wrote. So no statement ever stayed
prepared from one request to the next.

A transaction that ran nothing but SELECTs changed nothing, so its COMMIT ends it exactly as a ROLLBACK would (its
row locks, FOR UPDATE included, are released either way); it is committed just before SQLAlchemy rolls it back,
whose ROLLBACK then finds the connection idle and is not sent. Any other statement in the transaction (a write, a
savepoint, a SET, DDL) and any failed transaction keep the real ROLLBACK.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

_WROTE = "slipway_transaction_wrote"


def end_reads_with_commit(engine: Engine) -> None:
    """Install on ``engine`` (PostgreSQL only; SQLite has no prepared statements to keep)."""
    if engine.dialect.name != "postgresql":
        return
    event.listen(engine, "before_cursor_execute", _note_statement)
    event.listen(engine, "commit", _forget)
    event.listen(engine, "rollback", _commit_if_read_only)


def _note_statement(
    connection: Connection, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    if not statement.lstrip()[:6].upper().startswith("SELECT"):
        connection.info[_WROTE] = True


def _forget(connection: Connection) -> None:
    connection.info.pop(_WROTE, None)


def _commit_if_read_only(connection: Connection) -> None:
    import psycopg  # here: a deployment on SQLite never loads it
    from psycopg.pq import TransactionStatus

    if connection.info.pop(_WROTE, False):
        return
    raw = connection.connection.dbapi_connection
    if not isinstance(raw, psycopg.Connection) or raw.info.transaction_status != TransactionStatus.INTRANS:
        return  # idle (nothing to end) or failed (only a ROLLBACK ends it)
    try:
        raw.commit()
    except psycopg.Error:
        return  # the ROLLBACK that follows ends it, or finds the connection broken as it would have
