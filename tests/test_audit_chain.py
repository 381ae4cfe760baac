"""Tamper evidence: the audit chain verifies, and fails at the exact entry that was changed or removed with SQL;
concurrent writers never chain onto the same predecessor; retention removes whole old ranges behind a checkpoint
that verification still holds through; every filter is served by an index. Both databases (locking and SQL)."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select, text

from app.audit.chain import SQL_CHAIN_MAX_ENTRIES, PendingEntry, _append_in_python, append, entry_hash
from app.audit.models import AuditLog
from app.audit.query import filtered, first_on_or_after, last_through, parse_filter
from app.auditing.services import prune_old_entries, verify_chain
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.diagnostics.checks import check_audit
from app.users.models import User
from app.users.tokens import issue_session_token
from tests.conftest import Persona
from tests.test_query_plans import plan

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _tokens(client: FlaskClient, person: Persona, count: int, prefix: str = "t") -> None:
    for number in range(count):
        reply = client.post("/api/v2/users/me/tokens", json={"name": f"{prefix}{number}"}, headers=person.auth)
        assert reply.status_code == 201, reply.json


def _sql(app: Flask, statement: str, **values: object) -> None:
    with app.app_context():
        db.session.execute(text(statement), values)
        db.session.commit()


def _verify(client: FlaskClient, owner: Persona) -> dict[str, object]:
    reply = client.get("/api/v2/audit/verify", headers=owner.auth)
    assert reply.status_code == 200
    answer: dict[str, object] = reply.json
    return answer


def test_an_entry_changed_by_hand_breaks_the_chain_there(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _tokens(client, personas["carol"], 4)
    alice = personas["alice"]
    before = _verify(client, alice)
    assert before["ok"] is True and before["broken_at"] is None
    _sql(app, "UPDATE audit_logs SET diff = :diff WHERE id = 10", diff='{"name":{"new":"innocent"}}')
    after = _verify(client, alice)
    assert (after["ok"], after["broken_at"], after["checked"]) == (False, 10, 9), after
    assert "entry 10 was changed" in str(after["reason"])
    with app.test_request_context():
        section = check_audit()
    assert section.severity == "error" and "entry 10 was changed" in section.warnings[0]["message"]


def test_an_entry_deleted_by_hand_breaks_the_chain_there(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _tokens(client, personas["carol"], 4)
    _sql(app, "DELETE FROM audit_logs WHERE id = 9")
    after = _verify(client, personas["alice"])
    assert (after["ok"], after["broken_at"]) == (False, 9) and "entry 9 is missing" in str(after["reason"]), after


def test_the_newest_entry_deleted_by_hand_is_missed_too(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    _tokens(client, personas["carol"], 2)
    with app.app_context():
        newest = db.session.scalar(select(func.max(AuditLog.id)))
    _sql(app, "DELETE FROM audit_logs WHERE id = :id", id=newest)
    after = _verify(client, personas["alice"])
    assert (after["ok"], after["broken_at"]) == (False, newest), after


def test_an_entry_rehashed_by_hand_still_breaks_the_next_link(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """Someone who recomputes the edited entry's own hash breaks its successor's link instead."""
    from app.audit.chain import entry_hash

    _tokens(client, personas["carol"], 3)
    with app.app_context():
        row = db.session.get(AuditLog, 9)
        assert row is not None
        row.resource_name = "innocent"
        row.hash = entry_hash(
            row.id, row.time, row.actor_kind, row.user_id, row.username, row.ip, row.user_agent, row.resource_type,
            row.resource_id, row.resource_name, row.action, row.build_reason, row.status_code, row.diff, row.prev_hash,
        )  # fmt: skip
        db.session.commit()
    after = _verify(client, personas["alice"])
    assert (after["ok"], after["broken_at"]) == (False, 10) and "does not follow" in str(after["reason"]), after


def test_concurrent_writers_never_share_a_predecessor(app: Flask, personas: dict[str, Persona]) -> None:
    """Two threads, each its own connection and transactions, append at once: ids stay contiguous and every entry
    chains onto the one before it (the chain head's row lock orders them)."""
    start, failures, per_thread = threading.Barrier(2), [], 15

    def write(user_id: str) -> None:
        try:
            with app.app_context():
                user = db.session.get(User, user_id)
                assert user is not None
                start.wait(timeout=30)
                for _ in range(per_thread):
                    issue_session_token(user, 60)
        except Exception as exc:  # reported below, with the thread's cause
            failures.append(repr(exc))

    threads = [threading.Thread(target=write, args=(personas[name].id,)) for name in ("carol", "dave")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    with app.app_context():
        ids = list(db.session.scalars(select(AuditLog.id).order_by(AuditLog.id)))
        result = verify_chain()
    assert ids == list(range(1, len(ids) + 1)) and len(ids) >= 8 + 2 * per_thread
    assert result.ok, result


def test_retention_removes_old_ranges_behind_a_checkpoint_that_verifies(
    app: Flask, client: FlaskClient, settings: Settings, personas: dict[str, Persona]
) -> None:
    _tokens(client, personas["carol"], 3, prefix="old")
    with app.app_context():
        newest_old = db.session.scalar(select(func.max(AuditLog.id)))
        cut_at = db.session.scalar(select(AuditLog.time).where(AuditLog.id == newest_old))
    assert newest_old is not None and cut_at is not None
    _tokens(client, personas["dave"], 2, prefix="new")
    keep_a_day = dataclasses.replace(settings, audit_retention=86_400)
    with app.app_context():
        # As if a day had passed since the old entries (and not quite since the new ones).
        assert prune_old_entries(keep_a_day, now=cut_at + timedelta(days=1, microseconds=1)) is not None
        result = verify_chain()
        kept = db.session.execute(select(AuditLog.id, AuditLog.action, AuditLog.username, AuditLog.resource_type,
                                         AuditLog.resource_name).order_by(AuditLog.id)).all()  # fmt: skip
    assert result.ok, result
    assert kept[0].id == newest_old + 1 and kept[-1].action == "prune" and kept[-1].username == "audit-retention"
    assert {entry.resource_name for entry in kept if entry.resource_type == "api_key"} == {"new0", "new1"}
    with app.app_context():
        assert prune_old_entries(keep_a_day, now=cut_at + timedelta(days=1, microseconds=1)) is None  # nothing older
    # The first kept entry removed by hand, and the checkpoint forged over it (its hash copied), is still caught:
    # no prune entry in the chain names that checkpoint.
    gone = newest_old + 1
    with app.app_context():
        gone_hash = db.session.scalar(select(AuditLog.hash).where(AuditLog.id == gone))
    _sql(app, "DELETE FROM audit_logs WHERE id = :id", id=gone)
    _sql(app, "UPDATE audit_chain_head SET base_seq = :id, base_hash = :hash", id=gone, hash=gone_hash)
    after = _verify(client, personas["alice"])
    assert after["ok"] is False and after["broken_at"] == gone + 1, after
    assert "checkpoint was not recorded" in str(after["reason"])


def test_retention_is_off_by_default(app: Flask, settings: Settings, personas: dict[str, Persona]) -> None:
    assert settings.audit_retention == 0
    with app.app_context():
        assert prune_old_entries(settings, now=utcnow() + timedelta(days=3650)) is None
        assert db.session.scalar(select(func.count()).select_from(AuditLog)) == 8


FILTERS = {
    "resource_type:workspace": "ix_audit_logs_resource_type_id",
    "resource_id:abc": "ix_audit_logs_resource_id_id",
    "action:create": "ix_audit_logs_action_id",
    "username:alice": "ix_audit_logs_username_id",
    "build_reason:autostart": "ix_audit_logs_build_reason_id",
}


def test_every_filter_is_served_by_an_index(app: Flask) -> None:
    wrong = []
    with app.app_context():
        for q in [*FILTERS, "date_from:2026-01-01 date_to:2026-12-31", ""]:
            query = filtered(parse_filter(q)).where(AuditLog.id < 5_000_000).limit(26)
            shown = plan(query, discouraged=("seqscan", "sort"))
            db.session.rollback()
            scanned = "Seq Scan" in shown or "SCAN audit_logs" in shown.replace("SCAN audit_logs USING", "")
            # The index gives the order too (newest first): no sort.
            if scanned or "Sort" in shown or "TEMP B-TREE" in shown or (q in FILTERS and FILTERS[q] not in shown):
                wrong.append(f"{q!r}: {shown}")
    assert wrong == []


def test_a_date_range_is_found_through_the_time_index(app: Flask) -> None:
    with app.app_context():
        day = utcnow().date()
        shown = [
            plan(first_on_or_after(day), discouraged=("seqscan", "sort")),
            plan(last_through(day), discouraged=("seqscan", "sort")),
        ]
        db.session.rollback()
    for one in shown:
        assert "ix_audit_logs_time_id" in one and "Sort" not in one and "TEMP B-TREE" not in one, one


def _entry(number: int, **fields: object) -> PendingEntry:
    values: dict[str, object] = {
        "actor_kind": "user", "user_id": None, "username": "zoë", "ip": "", "user_agent": "Bröwser/1 ☃",
        "resource_type": "template", "resource_id": f"id-{number}", "resource_name": f"naïve-{number} 模板",
        "action": "write", "diff": {"name": {"old": "ä", "new": "€ \x1e \n", "secret": False}},
    }  # fmt: skip
    values.update(fields)
    return PendingEntry(**values)  # type: ignore[arg-type]


def test_the_chain_computed_in_sql_hashes_as_python_verifies(app: Flask, personas: dict[str, Persona]) -> None:
    """PostgreSQL chains an append in SQL (sha256() in one statement), a bulk one and SQLite's in Python: every way
    gives the hashes Python recomputes, over non-ASCII text, NULLs and '' and several entries in one transaction,
    and a chain written one way continues the other way (the format is the same)."""
    with app.app_context():
        connection = db.session.connection()
        start = db.session.scalar(select(func.max(AuditLog.id))) or 0
        _append_in_python(connection, [_entry(1, user_id="u-1", build_reason="initiator")])
        append(connection, [_entry(2), _entry(3, status_code=401, ip="::1"), _entry(4, user_agent="", diff={})])
        append(connection, [_entry(5)])
        append(connection, [_entry(number) for number in range(6, 6 + SQL_CHAIN_MAX_ENTRIES + 1)])  # the bulk way
        db.session.commit()
        rows = db.session.scalars(select(AuditLog).where(AuditLog.id > start).order_by(AuditLog.id)).all()
        assert [row.id for row in rows] == list(range(start + 1, start + 7 + SQL_CHAIN_MAX_ENTRIES))
        assert rows[1].resource_name == "naïve-2 模板" and rows[1].user_id is None and rows[2].status_code == 401
        for before, row in itertools.pairwise(rows):
            assert row.prev_hash == before.hash and row.time >= before.time
        for row in rows:
            columns = {column.name: getattr(row, column.name) for column in AuditLog.__table__.columns}
            stored = columns.pop("hash")
            assert entry_hash(id_=columns.pop("id"), **columns) == stored, row.id
        result = verify_chain()
    assert result.ok, result


def test_concurrent_appends_of_several_entries_keep_one_serial_chain(app: Flask) -> None:
    """Two threads append several entries per transaction at once (PostgreSQL's recursive statement): ids stay
    gapless, each entry chains onto the one before, and times rise with ids (taken after the head's lock)."""
    start, failures, per_thread = threading.Barrier(2), [], 10

    def write(name: str) -> None:
        try:
            with app.app_context():
                start.wait(timeout=30)
                for number in range(per_thread):
                    append(db.session.connection(), [_entry(number, username=name) for _ in range(3)])
                    db.session.commit()
        except Exception as exc:  # reported below, with the thread's cause
            failures.append(repr(exc))

    threads = [threading.Thread(target=write, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    with app.app_context():
        rows = db.session.execute(select(AuditLog.id, AuditLog.time, AuditLog.username).order_by(AuditLog.id)).all()
        result = verify_chain()
    assert [row.id for row in rows] == list(range(1, len(rows) + 1)) and result.ok, result
    assert all(before.time <= row.time for before, row in itertools.pairwise(rows))
    mine = [row.username for row in rows if row.username in ("one", "two")]
    assert len(mine) == 2 * 3 * per_thread
    # A transaction's three entries are never interleaved with the other thread's.
    assert all(len(set(mine[index : index + 3])) == 1 for index in range(0, len(mine), 3))
