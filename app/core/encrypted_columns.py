"""Column types that encrypt on write and decrypt on read with the application's keyring (app/core/crypto.py).

Declare a secret's column with one of these and nothing else changes: the model reads and writes plain values,
the database holds ``enc1:<key id>:…`` bytes, and ``slipway server encryption rotate`` finds the column by its
type. They cannot be compared or searched in SQL (every write has a fresh nonce): keep ids and flags in
columns of their own.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import Dialect, LargeBinary
from sqlalchemy.types import TypeDecorator

from app.core.columns import decode_stored
from app.core.crypto import current_keyring
from protocol.codec import Message

T = TypeVar("T")
M = TypeVar("M", bound=Message)


class EncryptedColumn(TypeDecorator[T]):
    """The base of every encrypted column type: how a value turns into bytes and back."""

    impl = LargeBinary
    cache_ok = True

    @abstractmethod
    def to_plaintext(self, value: T) -> bytes: ...

    @abstractmethod
    def from_plaintext(self, plaintext: bytes) -> T | None: ...

    def process_bind_param(self, value: T | None, dialect: Dialect) -> bytes | None:
        return None if value is None else current_keyring().encrypt(self.to_plaintext(value))

    def process_result_value(self, value: Any, dialect: Dialect) -> T | None:
        if value is None:
            return None
        return self.from_plaintext(current_keyring().decrypt(bytes(value)))


class EncryptedBytes(EncryptedColumn[bytes]):
    """Bytes such as a Terraform state."""

    cache_ok = True  # SQLAlchemy asks every subclass to say so

    def to_plaintext(self, value: bytes) -> bytes:
        return value

    def from_plaintext(self, plaintext: bytes) -> bytes:
        return plaintext


class EncryptedText(EncryptedColumn[str]):
    """A string such as an OAuth access or refresh token."""

    cache_ok = True  # SQLAlchemy asks every subclass to say so

    def to_plaintext(self, value: str) -> bytes:
        return value.encode()

    def from_plaintext(self, plaintext: bytes) -> str:
        return plaintext.decode()


class EncryptedMessageColumn(EncryptedColumn[M]):
    """A protocol message (as :class:`app.core.columns.MessageColumn`), encrypted."""

    cache_ok = True  # SQLAlchemy asks every subclass to say so

    def __init__(self, message: type[M]) -> None:
        super().__init__()
        self.message = message

    def to_plaintext(self, value: M) -> bytes:
        return value.dumps().encode()

    def from_plaintext(self, plaintext: bytes) -> M | None:
        return decode_stored(self.message, json.loads(plaintext))


class EncryptedMessageListColumn(EncryptedColumn[tuple[M, ...]]):
    """A list of protocol messages (as :class:`app.core.columns.MessageListColumn`), encrypted."""

    cache_ok = True  # SQLAlchemy asks every subclass to say so

    def __init__(self, message: type[M]) -> None:
        super().__init__()
        self.message = message

    def to_plaintext(self, value: Sequence[M]) -> bytes:
        return json.dumps([item.to_json() for item in value], separators=(",", ":")).encode()

    def from_plaintext(self, plaintext: bytes) -> tuple[M, ...]:
        items = json.loads(plaintext)
        decoded = (decode_stored(self.message, item) for item in (items if isinstance(items, list) else []))
        return tuple(item for item in decoded if item is not None)
