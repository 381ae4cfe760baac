"""How much room the server has: free space where the data dir lives (SQLite, uploads, Redis's files), and the
database's own size, for /healthz and the Health page."""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlalchemy import text

from app.core.extensions import db

# Below this, writes are about to fail (SQLite's journal, an uploaded archive): the server is not healthy.
MIN_FREE_BYTES = 64 * 1024 * 1024
# Below this share of the disk, the Health page warns before anything fails.
WARN_FREE_SHARE = 0.10


def disk_space(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the filesystem holding ``path``."""
    usage = shutil.disk_usage(path)
    return usage.free, usage.total


def database_size() -> int | None:
    """Bytes the database takes (PostgreSQL's own count, or SQLite's files); None when it cannot be told."""
    engine = db.engine
    if engine.dialect.name == "postgresql":
        return int(db.session.scalar(text("SELECT pg_database_size(current_database())")) or 0)
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    files = [Path(database + suffix) for suffix in ("", "-wal", "-shm")]
    return sum(path.stat().st_size for path in files if path.exists())
