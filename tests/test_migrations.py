from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask import Flask

from app.core.extensions import db
from app.factory import MIGRATIONS_DIR

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def test_there_is_exactly_one_migration_head() -> None:
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    assert len(script.get_heads()) == 1


def test_migrated_schema_matches_the_models(app: Flask) -> None:
    """The fixture database was built by running every migration; the models must describe exactly that."""
    with app.app_context(), db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, db.metadata) == []
