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
    # Set when nothing needed the archive any more and its bytes were dropped (the row stays: jobs name it).
    # Uploading the same archive again brings it back.
    freed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @property
    def freed(self) -> bool:
        return self.freed_at is not None


class FileUpload(Model):
    """Someone uploaded this archive (the latest time): the same archive uploaded by two people is one file with
    two uploads, and it counts against the storage quota of each of them while they keep it."""

    __tablename__ = "file_uploads"

    file_id: Mapped[str] = mapped_column(ForeignKey("files.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True)
    uploaded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
