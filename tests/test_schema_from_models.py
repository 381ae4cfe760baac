"""A new database is created from the models in one step (app/server/schema.py); it must be the very database that
walking through every migration gives: same tables, columns (type, nullability, default), primary keys, indexes
(partial ones' conditions too), unique and check constraints, foreign keys (with their ON DELETE), seeded rows and
Alembic revision. The migrated side is the suite's own template database (tests/conftest.py runs every migration)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask import Flask

from app.core.extensions import db
from app.factory import MIGRATIONS_DIR, create_app
from app.server.schema import bring_schema_to_head
from tests.conftest import close_app, make_settings
from tests.support.postgres import PostgresCluster

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.fixture
def created_url(database_url: str, tmp_path: Path, postgres: PostgresCluster, redis_server: str) -> Iterator[str]:
    """A database of the same kind as `database_url`, created from the models by what `slipway server` runs."""
    name = f"models_{uuid.uuid4().hex[:12]}"
    if database_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'from-models.db'}"
    else:
        postgres.execute(f"CREATE DATABASE {name}")
        url = postgres.url(name)
    app = create_app(make_settings(tmp_path, url, redis_server))
    with app.app_context():
        assert bring_schema_to_head() is True
    close_app(app)
    yield url
    if not database_url.startswith("sqlite"):
        postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")


def describe(url: str) -> dict[str, Any]:
    """Everything the inspector can tell of a database's schema, in a form that compares with ==."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        inspector = sa.inspect(engine)
        tables: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            tables[table] = {
                # By name: migrations add columns at the end, the models declare them where they read best.
                "columns": sorted(
                    (column["name"], str(column["type"]), column["nullable"], _default(column["default"]))
                    for column in inspector.get_columns(table)
                ),
                "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
                "indexes": sorted(
                    (
                        index["name"],
                        tuple(index["column_names"]),
                        bool(index["unique"]),
                        # A partial index's condition (a TextClause: compared by its text).
                        str({key: str(value) for key, value in index.get("dialect_options", {}).items()}),
                    )
                    for index in inspector.get_indexes(table)
                ),
                "unique constraints": sorted(
                    (str(unique["name"]), tuple(unique["column_names"]))
                    for unique in inspector.get_unique_constraints(table)
                ),
                "check constraints": sorted(
                    (str(check["name"]), _squash(check["sqltext"])) for check in inspector.get_check_constraints(table)
                ),
                "foreign keys": sorted(
                    (
                        str(key["name"]),
                        tuple(key["constrained_columns"]),
                        key["referred_table"],
                        tuple(key["referred_columns"]),
                        str(key.get("options", {}).get("ondelete", "")).upper(),
                    )
                    for key in inspector.get_foreign_keys(table)
                ),
            }
        with engine.connect() as connection:
            seeded = {
                "revision": connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all(),
                "organizations": _rows(connection, "SELECT id, name, display_name, is_default FROM organizations"),
                "groups": _rows(connection, "SELECT id, organization_id, name, source FROM groups"),
                "users": _rows(connection, "SELECT id, username, email, password_hash, login_type, status FROM users"),
            }
        return {"tables": tables, "seeded": seeded}
    finally:
        engine.dispose()


def _default(default: str | None) -> str | None:
    # SQLite keeps a default as written ('' or ''), PostgreSQL with its cast (''::character varying).
    return None if default is None else default.split("::")[0].strip("()")


def _squash(sql: str) -> str:
    return "".join(sql.split()).strip("()").lower()


def _rows(connection: sa.Connection, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in connection.execute(sa.text(query))]


def test_schema_from_models_equals_schema_from_migrations(database_url: str, created_url: str) -> None:
    migrated, created = describe(database_url), describe(created_url)
    assert set(created["tables"]) == set(migrated["tables"])
    differences = {
        f"{table} {aspect}": {
            "from models only": sorted(set(created["tables"][table][aspect]) - set(facts)),
            "from migrations only": sorted(set(facts) - set(created["tables"][table][aspect])),
        }
        for table, aspects in migrated["tables"].items()
        for aspect, facts in aspects.items()
        if created["tables"][table][aspect] != facts
    }
    assert differences == {}
    assert created["seeded"] == migrated["seeded"]
    assert migrated["seeded"]["organizations"], "the migrations seed the default organisation"


def test_a_database_created_from_models_is_upgraded_at_the_next_start(
    created_url: str, redis_server: str, tmp_path: Path
) -> None:
    """Stamped at the head: the next start finds tables, so it runs the migrations (none left), never creates again."""
    app: Flask = create_app(make_settings(tmp_path, created_url, redis_server))
    try:
        with app.app_context():
            assert bring_schema_to_head() is False
            with db.engine.connect() as connection:
                assert MigrationContext.configure(connection).get_current_heads() == (head_revision(),)
    finally:
        close_app(app)


def head_revision() -> str:
    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    assert head is not None
    return head
