"""A full disk under the data dir is a finding, not an "OK": /healthz answers 503 saying so and the Health page
marks it an error (with the database's size), until space is freed. The data dir is a real small filesystem (a
tmpfs the test mounts), filled with a real file."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask

from app.core.config import Settings
from app.core.disk import MIN_FREE_BYTES
from tests.conftest import PASSWORD, make_settings
from tests.support.web import sign_in

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
