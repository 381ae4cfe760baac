"""The keys that have encrypted data, kept in a small table (like Coder's dbcrypt_keys), and key rotation.

A key gets a row when a server starts with it as the encrypting (first) key; a rotation that leaves no value on
an older key marks that key revoked. At start the server refuses to run when a key that may still hold data
(a row not revoked) is not among its keys: that way no row is ever silently unreadable.

Only the SHA-256 of a key is stored, and the short id the encrypted values carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from flask import Flask
from sqlalchemy import Column, LargeBinary, String, Table, and_, column, func, literal, select, table, type_coerce
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, utcnow
from app.core.config import Settings
from app.core.crypto import EXTENSION, FORMAT, HEADER_BYTES, KEY_ID_CHARS, Keyring, build_keyring, key_id_of
from app.core.encrypted_columns import EncryptedColumn
from app.core.extensions import Model, db, rows_changed

ROTATION_BATCH_SIZE = 200
UNREADABLE = "(not encrypted)"


class KeyProblem(RuntimeError):
    """The configured keys do not fit the database; the message is one line for the operator."""


class EncryptionKeyRecord(Model):
    __tablename__ = "encryption_keys"

    key_id: Mapped[str] = mapped_column(String(KEY_ID_CHARS), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set once a rotation left no value on this key: it may then be removed from the configuration.
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


def init_app(app: Flask, settings: Settings) -> None:
    """Give the app its keyring: the configured keys, then the one derived from the secret key."""
    app.extensions[EXTENSION] = build_keyring(settings.encryption_keys, settings.secret_key)


def check_keys(keyring: Keyring) -> None:
    """Refuse keys that cannot read the database's data; then record the encrypting key (the start-up check)."""
    for record in db.session.scalars(
        select(EncryptionKeyRecord).where(EncryptionKeyRecord.revoked_at.is_(None)).order_by(EncryptionKeyRecord.key_id)
    ):
        known = next((key for key in keyring.keys if key.key_id == record.key_id), None)
        if known is None:
            raise KeyProblem(
                f"the database holds secrets encrypted with key {record.key_id}, which is not configured: add it "
                "to --encryption-keys (SLIPWAY_ENCRYPTION_KEYS), or restore the secret key it was derived from "
                "(see README, 'Secrets in the database')"
            )
        if known.digest != record.digest:
            raise KeyProblem(
                f"encryption key {record.key_id} is not the key of that id that encrypted the database's secrets "
                "(another key with the same short id): configure the original key"
            )
    register_key(keyring)


def register_key(keyring: Keyring) -> None:
    """Record the encrypting key (again: a key put first after a rotation revoked it holds data once more)."""
    active = keyring.active
    record = db.session.get(EncryptionKeyRecord, active.key_id)
    if record is None:
        db.session.add(EncryptionKeyRecord(key_id=active.key_id, digest=active.digest))
    elif record.revoked_at is not None:
        record.revoked_at = None
    db.session.commit()


@dataclass(frozen=True)
class EncryptedColumnRef:
    table: Table
    column: Column[object]

    @property
    def name(self) -> str:
        return f"{self.table.name}.{self.column.name}"


def encrypted_columns() -> list[EncryptedColumnRef]:
    """Every column of an encrypted type, found in the models: a new one is rotated without further ado."""
    found = []
    for model_table in db.metadata.sorted_tables:
        for model_column in model_table.columns:
            if isinstance(model_column.type, EncryptedColumn):
                found.append(EncryptedColumnRef(model_table, model_column))
    return sorted(found, key=lambda ref: ref.name)


@dataclass
class KeyStatus:
    key_id: str
    configured: bool
    active: bool
    created_at: datetime | None = None
    revoked_at: datetime | None = None
    derived: bool = False


@dataclass
class EncryptionStatus:
    keys: list[KeyStatus]
    # column name -> {key id: number of values}
    values: dict[str, dict[str, int]] = field(default_factory=dict)

    def values_on(self, key_id: str) -> int:
        return sum(counts.get(key_id, 0) for counts in self.values.values())


def encryption_status(keyring: Keyring) -> EncryptionStatus:
    values = {ref.name: _count_by_key(ref) for ref in encrypted_columns()}
    records = {record.key_id: record for record in db.session.scalars(select(EncryptionKeyRecord))}
    key_ids = list(dict.fromkeys([*(key.key_id for key in keyring.keys), *records]))
    key_ids += sorted({key for counts in values.values() for key in counts if key not in key_ids})
    derived = {key.key_id for key in keyring.keys if key.derived}
    keys = [
        KeyStatus(
            key_id=key_id,
            configured=keyring.knows(key_id),
            active=key_id == keyring.active.key_id,
            created_at=records[key_id].created_at if key_id in records else None,
            revoked_at=records[key_id].revoked_at if key_id in records else None,
            derived=key_id in derived,
        )
        for key_id in key_ids
    ]
    return EncryptionStatus(keys=keys, values=values)


def _count_by_key(ref: EncryptedColumnRef) -> dict[str, int]:
    header = type_coerce(func.substr(ref.column, 1, HEADER_BYTES), LargeBinary)
    rows = db.session.execute(
        select(header, func.count()).select_from(ref.table).where(ref.column.is_not(None)).group_by(header)
    ).all()
    counts: dict[str, int] = {}
    for prefix, count in rows:
        key_id = key_id_of(bytes(prefix)) or UNREADABLE
        counts[key_id] = counts.get(key_id, 0) + count
    return counts


Progress = Callable[[str, int, int], None]


@dataclass
class RotationResult:
    reencrypted: int
    # Keys marked revoked: nothing is encrypted with them any more.
    revoked: list[str]
    # Values a concurrent writer left on another key (a replica not yet restarted with the new key first).
    remaining: int


def rotate(
    keyring: Keyring, *, batch_size: int = ROTATION_BATCH_SIZE, progress: Progress | None = None
) -> RotationResult:
    """Re-encrypt every value that is not on the active key, one committed batch at a time (an interrupted
    rotation loses nothing and a re-run carries on), then revoke the keys no value uses any more."""
    register_key(keyring)
    total = 0
    for ref in encrypted_columns():
        total += _rotate_column(ref, keyring, batch_size, progress)
    status = encryption_status(keyring)
    remaining = sum(
        count
        for counts in status.values.values()
        for key_id, count in counts.items()
        if key_id != keyring.active.key_id
    )
    revoked: list[str] = []
    if not remaining:
        for record in db.session.scalars(
            select(EncryptionKeyRecord).where(
                EncryptionKeyRecord.revoked_at.is_(None), EncryptionKeyRecord.key_id != keyring.active.key_id
            )
        ):
            record.revoked_at = utcnow()
            revoked.append(record.key_id)
        db.session.commit()
    return RotationResult(reencrypted=total, revoked=sorted(revoked), remaining=remaining)


def _rotate_column(ref: EncryptedColumnRef, keyring: Keyring, batch_size: int, progress: Progress | None) -> int:
    (primary_key,) = ref.table.primary_key.columns
    # Plain bytes in and out: the model's column type would encrypt the new value a second time.
    raw = table(ref.table.name, column(primary_key.name, primary_key.type), column(ref.column.name, LargeBinary))
    raw_key, raw_value = raw.c[primary_key.name], raw.c[ref.column.name]
    active_header = FORMAT + keyring.active.key_id.encode("ascii") + b":"
    header = type_coerce(func.substr(raw_value, 1, HEADER_BYTES), LargeBinary)
    stale = and_(raw_value.is_not(None), header != literal(active_header, LargeBinary))
    todo = db.session.scalar(select(func.count()).select_from(raw).where(stale)) or 0
    done, last = 0, None
    while True:
        query = select(raw_key, raw_value).where(stale).order_by(raw_key).limit(batch_size)
        if last is not None:
            query = query.where(raw_key > last)
        batch = db.session.execute(query).all()
        if not batch:
            break
        for row_key, stored in batch:
            fresh = keyring.reencrypt(bytes(stored))
            if fresh is None:
                continue
            # Conditional: a value written meanwhile (already on the new key) is left as it is.
            changed = db.session.execute(
                raw.update().where(raw_key == row_key, raw_value == stored).values({ref.column.name: fresh})
            )
            done += rows_changed(changed)
        db.session.commit()
        last = batch[-1][0]
        if progress is not None:
            progress(ref.name, done, todo)
    return done
