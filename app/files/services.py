"""Template archives: accepted once per content (content-addressed), checked to be a tar or zip."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.core.errors import InvalidInput, NotFound, TooLarge
from app.core.extensions import db
from app.files.models import File
from app.users.models import User

MAX_ARCHIVE_BYTES = 10 * 1024 * 1024
TAR = "application/x-tar"
ZIP = "application/zip"


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


def store_file(uploader: User, data: bytes) -> File:
    if len(data) > MAX_ARCHIVE_BYTES:
        raise TooLarge(f"The archive is larger than {MAX_ARCHIVE_BYTES // (1024 * 1024)} MiB.")
    if not data:
        raise InvalidInput("The upload is empty.")
    mimetype = detect_archive_type(data)
    digest = hashlib.sha256(data).hexdigest()
    existing: File | None = db.session.scalar(select(File).where(File.sha256 == digest))
    if existing is not None:
        return existing
    record = File(sha256=digest, mimetype=mimetype, size=len(data), data=data, created_by=uploader.id)
    db.session.add(record)
    try:
        db.session.commit()
    except IntegrityError:  # the same archive uploaded concurrently: use the stored one
        db.session.rollback()
        stored: File | None = db.session.scalar(select(File).where(File.sha256 == digest))
        assert stored is not None  # noqa: S101 - the unique constraint just told us it exists
        return stored
    return record


def get_file(file_id: str) -> File:
    record = db.session.get(File, file_id)
    if record is None:
        raise NotFound("No such file.")
    return record
