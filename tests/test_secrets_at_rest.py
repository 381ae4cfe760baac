"""No secret sits in the database in clear: after a real flow (a template pushed with a secret variable value and
imported, a workspace built whose state holds its agent's token, a failed build, an API token, a provisioner key,
a browser session), the raw database (the SQLite files' bytes; every PostgreSQL table read with plain SQL) holds
none of them, while the server still reads every one back."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from flask import Flask
from sqlalchemy.engine import make_url

from app.core.extensions import db
from tests.conftest import Persona
from tests.support.secret_flow import WORKSPACE_NAME, run_the_flow

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def raw_database(app: Flask) -> bytes:
    """What a copy of the database shows: the SQLite files as they lie on disk, or every PostgreSQL row."""
    with app.app_context():
        url = make_url(db.engine.url)
        db.engine.dispose()
    if url.get_backend_name() == "sqlite":
        database = Path(str(url.database))
        return b"".join(path.read_bytes() for path in sorted(database.parent.glob(database.name + "*")))
    dump = []
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False)) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name"
        ).fetchall()
        for (table,) in tables:
            for row in connection.execute(f'SELECT * FROM "{table}"').fetchall():  # noqa: S608 - names from the catalog
                dump.extend(
                    bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode() for value in row
                )
    return b"\n".join(dump)


def test_no_secret_is_stored_in_clear(app: Flask, personas: dict[str, Persona]) -> None:
    secrets = run_the_flow(app, personas)
    raw = raw_database(app)
    assert WORKSPACE_NAME.encode() in raw and b"eu-west" in raw, "the dump shows what is stored in clear"
    leaked = [what for what, secret in secrets.items() if secret.encode() in raw]
    assert leaked == [], f"found in clear in the database: {', '.join(leaked)}"


def test_the_flow_reads_back_what_it_needs_and_shows_no_secret(app: Flask, personas: dict[str, Persona]) -> None:
    run_the_flow(app, personas)
    api = app.test_client()
    bob = personas["bob"]
    versions = api.get("/api/v2/templates", headers=bob.auth).json
    version_id = versions[0]["active_version_id"]
    variables = api.get(f"/api/v2/templateversions/{version_id}/variables", headers=bob.auth).json
    assert [(item["name"], item["sensitive"], item["default_value"]) for item in variables] == [
        ("db_password", True, "")
    ]
    workspace = api.get("/api/v2/workspaces", headers=personas["carol"].auth).json[0]
    build = workspace["latest_build"]
    assert build["job"]["status"] == "failed"
    # The error keeps its sense, without the secret (as the log masks it).
    assert build["job"]["error"] == "local-exec failed: mysql -p******** exited 1"
