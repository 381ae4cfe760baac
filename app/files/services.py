"""Template archives: accepted once per content (content-addressed), checked to be a tar or zip.

Each upload is recorded per person (:class:`FileUpload`): the storage quota (``app/catalog/storage.py``) counts an
archive against everyone who uploaded it. An archive nothing needs any more is freed: its bytes are dropped and
the row stays, since past jobs name it; uploading the same archive again brings it back.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.core.columns import utcnow
from app.core.errors import Conflict, InvalidInput, NotFound, TooLarge
from app.core.extensions import db, rows_changed
from app.files.models import File, FileUpload
from app.users.models import User

MAX_ARCHIVE_BYTES = 10 * 1024 * 1024
TAR = "application/x-tar"
ZIP = "application/zip"
FREED = "The template archive was freed: nothing used it any more. Upload it again to use it."


@dataclass(frozen=True)
class Archive:
    """An upload checked to be an archive, not stored yet."""

    data: bytes
    mimetype: str
    sha256: str


def detect_archive_type(data: bytes) -> str:
    """tar (plain or gzipped) or zip, decided by content: the Content-Type header is only a hint."""
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        if zipfile.is_zipfile(io.BytesIO(data)):
            return ZIP
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            archive.next()
        return TAR
    except (tarfile.TarError, EOFError, OSError):
        pass
    raise InvalidInput("The upload is not a tar or zip archive.")


def check_archive(data: bytes) -> Archive:
    if len(data) > MAX_ARCHIVE_BYTES:
        raise TooLarge(f"The archive is larger than {MAX_ARCHIVE_BYTES // (1024 * 1024)} MiB.")
    if not data:
        raise InvalidInput("The upload is empty.")
    return Archive(data, detect_archive_type(data), hashlib.sha256(data).hexdigest())


def find_file(sha256: str) -> File | None:
    found: File | None = db.session.scalar(select(File).where(File.sha256 == sha256))
    return found


def store_file(uploader: User, archive: Archive) -> File:
    """The stored file with this content (stored now, brought back if it was freed), and the upload recorded."""
    record = find_file(archive.sha256)
    if record is None:
        record = File(
            sha256=archive.sha256,
            mimetype=archive.mimetype,
            size=len(archive.data),
            data=archive.data,
            created_by=uploader.id,
        )
        db.session.add(record)
        try:
            db.session.commit()
        except IntegrityError:  # the same archive uploaded concurrently: use the stored one
            db.session.rollback()
            record = find_file(archive.sha256)
            assert record is not None  # noqa: S101 - the unique constraint just told us it exists
    if record.freed:
        db.session.execute(
            update(File).where(File.id == record.id).values(data=archive.data, freed_at=None),
            execution_options={"synchronize_session": False},
        )
        db.session.commit()
        db.session.refresh(record)
    _record_upload(record.id, uploader.id)
    return record


def _record_upload(file_id: str, user_id: str) -> None:
    """Insert or refresh (uploaded_at) this person's upload of the file."""
    now = utcnow()
    refreshed = db.session.execute(
        update(FileUpload).where(FileUpload.file_id == file_id, FileUpload.user_id == user_id).values(uploaded_at=now)
    )
    if rows_changed(refreshed) == 0:
        db.session.add(FileUpload(file_id=file_id, user_id=user_id, uploaded_at=now))
    try:
        db.session.commit()
    except IntegrityError:  # the same person uploading it twice at once: either time will do
        db.session.rollback()


def get_file(file_id: str) -> File:
    record = db.session.get(File, file_id)
    if record is None:
        raise NotFound("No such file.")
    return record


def usable_file(file_id: str) -> File:
    """A file a new template version may use: it still holds its archive."""
    record = get_file(file_id)
    if record.freed:
        raise Conflict(FREED)
    return record


def archive_bytes(file_id: str) -> bytes:
    """The archive a job runs; a freed one cannot run (its version was archived)."""
    record = get_file(file_id)
    if record.freed:
        raise Conflict(FREED)
    return record.data
