"""The audit log's rows: one entry per change or sign-in event, chained by hashes, and the chain's single head."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime
from app.core.extensions import Model

# The hash an empty chain starts from (the "previous hash" of entry 1).
GENESIS_HASH = "0" * 64
CHAIN_HEAD_ID = 1
SequenceId = BigInteger().with_variant(Integer, "sqlite")


class AuditLog(Model):
    """An entry. Its id is its place in the chain (1, 2, 3 … with no gap but the pruned range before the head's
    ``base_seq``), handed out by the chain head under its row lock (app/audit/chain.py), never by a sequence that
    two writers could interleave. Each filter of ``GET /api/v2/audit`` has an index ending in ``id``, so a page of
    the newest matching entries is an index range scan however many there are."""

    __tablename__ = "audit_logs"
    __table_args__ = (
        Index("ix_audit_logs_resource_type_id", "resource_type", "id"),
        Index("ix_audit_logs_resource_id_id", "resource_id", "id"),
        Index("ix_audit_logs_action_id", "action", "id"),
        Index("ix_audit_logs_username_id", "username", "id"),
        Index("ix_audit_logs_build_reason_id", "build_reason", "id"),
        Index("ix_audit_logs_time_id", "time", "id"),
    )

    id: Mapped[int] = mapped_column(SequenceId, primary_key=True, autoincrement=False)
    time: Mapped[datetime] = mapped_column(UTCDateTime)
    # Who: a person (user_id and username), or the system (user_id None, username names it: "lifecycle-executor",
    # "provisioner-key:<name>", "psk"). ``actor_kind`` says which.
    actor_kind: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[str | None] = mapped_column(String(36))
    username: Mapped[str] = mapped_column(String(64))
    ip: Mapped[str] = mapped_column(String(64))
    user_agent: Mapped[str] = mapped_column(String(256))
    resource_type: Mapped[str] = mapped_column(String(32))
    resource_id: Mapped[str] = mapped_column(String(64))
    resource_name: Mapped[str] = mapped_column(String(256))
    action: Mapped[str] = mapped_column(String(16))
    build_reason: Mapped[str | None] = mapped_column(String(16))
    # 200 for a change; a refused sign-in is 401 (Coder's status_code).
    status_code: Mapped[int] = mapped_column(Integer)
    # Canonical JSON (sorted keys) of {field: {"old": …, "new": …, "secret": bool}}; a secret field's values are
    # never written, only that it changed. Kept as text so the hash covers exactly what is stored.
    diff: Mapped[str] = mapped_column(Text)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditChainHead(Model):
    """The one row every audited transaction locks to append: the last id handed out and its entry's hash. Its
    lock (an UPDATE, held until commit) is what keeps two concurrent transactions from chaining onto the same
    predecessor. ``base_seq``/``base_hash`` are the retention checkpoint: entries up to ``base_seq`` were pruned,
    and the first kept entry chains onto ``base_hash``."""

    __tablename__ = "audit_chain_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_seq: Mapped[int] = mapped_column(SequenceId)
    last_hash: Mapped[str] = mapped_column(String(64))
    base_seq: Mapped[int] = mapped_column(SequenceId)
    base_hash: Mapped[str] = mapped_column(String(64))
