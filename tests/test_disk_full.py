"""A full disk under the data dir is a finding, not an "OK": /healthz answers 503 saying so and the Health page
marks it an error (with the database's size), until space is freed; and a write refused for lack of space says so
(507 "The server's disk is full") on the API, the pages and the daemons' posts, rather than calling the database
unreachable. The data dir is a real small filesystem (a tmpfs the test mounts), filled with a real file."""

from __future__ import annotations

import errno
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from sqlalchemy import text

from app.core.config import Settings
from app.core.disk import MIN_FREE_BYTES
from app.core.errors import DISK_FULL, is_disk_full
from app.core.extensions import db
from tests.conftest import PASSWORD, make_settings
from tests.support.daemon import PSK, PSK_HEADERS
from tests.support.web import csrf_token, sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

AppFactory = Callable[[Settings], Flask]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    size = 2 * MIN_FREE_BYTES
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True
    )
    # The suite runs as root (as `make test` sets it up); a refusal is a failure to read, not a reason to skip.
    assert mounted.returncode == 0, f"cannot mount a tmpfs for the full-disk test: {mounted.stderr.strip()}"
    yield mount
    subprocess.run(["umount", "--lazy", str(mount)], check=False)


def test_a_full_data_dir_disk_is_unhealthy_until_space_is_freed(
    small_disk: Path, database_url: str, redis_server: str, app_factory: AppFactory
) -> None:
    app = app_factory(make_settings(small_disk, database_url, redis_server))
    client = app.test_client()
    assert client.get("/healthz").status_code == 200

    filler = small_disk / "filler"
    with filler.open("wb") as file:  # leave less than the minimum free
        file.write(b"\0" * (2 * MIN_FREE_BYTES - MIN_FREE_BYTES // 2))
    full = client.get("/healthz")
    assert full.status_code == 503
    assert full.get_data(as_text=True).startswith("unhealthy: disk full (")

    pages = app.test_client()
    pages.post("/api/v2/users/first", json={"username": "alice", "email": "alice@example.com", "password": PASSWORD})
    sign_in(pages, "alice@example.com", PASSWORD)
    login = pages.post("/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}).json
    auth = {"Authorization": f"Bearer {login['session_token']}"}
    report = pages.get("/api/v2/debug/health?force=true", headers=auth).json
    database = report["database"]
    assert database["severity"] == "error" and "disk_full" in [warning["code"] for warning in database["warnings"]]
    assert database["size_bytes"] > 0 and database["disk_free_bytes"] < MIN_FREE_BYTES
    assert "free of" in pages.get("/health?force=1").get_data(as_text=True)

    filler.unlink()
    assert client.get("/healthz").status_code == 200


def _fill(disk: Path) -> None:
    """Write a file until the filesystem refuses: no room at all is left for anything else."""
    with (disk / "filler").open("wb", buffering=0) as file:
        try:
            while True:
                file.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    with (disk / "filler").open("ab", buffering=0) as file:  # the last bytes, below a block
        try:
            while True:
                file.write(b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def test_a_write_refused_for_lack_of_space_says_so_on_every_path(
    small_disk: Path,
    migrated_templates: dict[tuple[str, bool], Any],
    redis_server: str,
    app_factory: AppFactory,
) -> None:
    # The database itself on the small disk (SQLite): its next write needs room the disk no longer has.
    database = small_disk / "slipway.db"
    shutil.copy(migrated_templates["sqlite", False].source, database)
    app = app_factory(make_settings(small_disk, f"sqlite:///{database}", redis_server, provisioner_daemon_psk=PSK))
    api = app.test_client()
    api.post("/api/v2/users/first", json={"username": "alice", "email": "alice@example.com", "password": PASSWORD})
    login = api.post("/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}).json
    auth = {"Authorization": f"Bearer {login['session_token']}"}
    pages = app.test_client()
    form_token = csrf_token(pages, "/login")
    # WAL mode reuses its log's room after a checkpoint: emptied, every write must grow the log, and cannot.
    with app.app_context():
        db.session.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        db.session.commit()
    _fill(small_disk)

    # Each refuses with what is wrong and what to do, not "The database is not answering".
    refusals = {
        "sign-in (API)": api.post("/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}),
        "create (API)": api.post("/api/v2/users/me/tokens", json={"name": "ci"}, headers=auth),
        "sign-in (page)": pages.post(
            "/login", data={"email": "alice@example.com", "password": PASSWORD, "csrf_token": form_token}
        ),
        "a daemon's post": api.post(
            "/api/v2/provisionerd/register", json={"name": "ext-1", "tags": {}}, headers=PSK_HEADERS
        ),
    }
    for path, reply in refusals.items():
        body = reply.get_data(as_text=True)
        assert reply.status_code == 507, (path, reply.status_code, body)
        assert "The server&#39;s disk is full" in body or "The server's disk is full" in body, (path, body)
        assert "not answering" not in body, path
    assert refusals["create (API)"].json["message"] == DISK_FULL

    # Room again: the same writes go through.
    (small_disk / "filler").unlink()
    assert api.post("/api/v2/users/me/tokens", json={"name": "ci"}, headers=auth).status_code == 201
    assert api.post("/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}).status_code == 201


def test_postgresql_and_os_refusals_for_lack_of_space_are_recognised() -> None:
    # PostgreSQL's own error class for a full disk (SQLSTATE 53100), and a file write's ENOSPC and quota.
    assert is_disk_full(psycopg.errors.DiskFull("could not extend file: No space left on device"))
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
    assert not is_disk_full(OSError(errno.ECONNREFUSED, "Connection refused"))
