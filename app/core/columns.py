"""Column types and defaults shared by every model."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import JSON, DateTime, Dialect, String
from sqlalchemy.types import TypeDecorator

from protocol.codec import JsonObject, Message, ProtocolError

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores no offset and would hand back naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)  # noqa: S101 - the column type guarantees it
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def rfc3339(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_rfc3339(value: str) -> datetime | None:
    """A time another process sent (RFC 3339 with a zone), or None when it is empty, malformed or zoneless."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


IdColumn = String(36)


M = TypeVar("M", bound=Message)


class MessageColumn(TypeDecorator[M]):
    """A protocol message stored as JSON and read back typed (an agent's definition, say); a stored value that no
    longer reads is None, so declare the column ``Mapped[X | None]`` or give the reader a default."""

    impl = JSON
    cache_ok = True

    def __init__(self, message: type[M]) -> None:
        super().__init__()
        self.message = message

    def process_bind_param(self, value: M | None, dialect: Dialect) -> JsonObject | None:
        return None if value is None else value.to_json()

    def process_result_value(self, value: Any, dialect: Dialect) -> M | None:
        return None if value is None else decode_stored(self.message, value)


class MessageListColumn(TypeDecorator[tuple[M, ...]]):
    """A list of protocol messages stored as a JSON array (a version's parameters, a build's values)."""

    impl = JSON
    cache_ok = True

    def __init__(self, message: type[M]) -> None:
        super().__init__()
        self.message = message

    def process_bind_param(self, value: Sequence[M] | None, dialect: Dialect) -> list[JsonObject] | None:
        return None if value is None else [item.to_json() for item in value]

    def process_result_value(self, value: Any, dialect: Dialect) -> tuple[M, ...] | None:
        if value is None:
            return None
        decoded = (decode_stored(self.message, item) for item in (value if isinstance(value, list) else []))
        return tuple(item for item in decoded if item is not None)


def decode_stored(message: type[M], value: object) -> M | None:
    """What the server stored came through the same message type, so this fails only for a row an older release
    wrote differently: the page must still render, so the value is logged and left out."""
    try:
        return message.from_json(value)
    except ProtocolError:
        log.warning("a stored %s could not be read; it is left out", message.__name__, exc_info=True)
        return None
