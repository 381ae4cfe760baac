from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import IdColumn, UTCDateTime, new_id, utcnow
from app.core.extensions import Model


class File(Model):
    """An uploaded template archive, stored once per content hash."""

    __tablename__ = "files"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    mimetype: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
