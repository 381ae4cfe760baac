"""Which release brought the database's schema to its revision: a replica older than the schema (a rollback of the
chart, a node still on the old image) cannot know the newer revision's name, but it can read this row and say
which release it needs (app/server/supervisor.py refuses to start with that sentence)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, utcnow
from app.core.extensions import Model

SINGLETON_ID = 1


class SchemaRelease(Model):
    """One row (``id`` 1), written by the server that migrated the schema (or created it), not by every start: so
    it names the oldest release that knows the schema's revision."""

    __tablename__ = "schema_release"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    release: Mapped[str] = mapped_column(String(64))
    revision: Mapped[str] = mapped_column(String(32))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
