"""A replica older than the database's schema (a chart rolled back, a node still on the old image) refuses to start
and says which release it needs, rather than failing on a revision it cannot find or serving a schema it does not
know. The newer release is played by the database itself: stamped at a revision this code lacks, with the row a
newer server would have written."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import text

from app.core.version import server_version
from app.server.schema import MIGRATIONS_DIR
from app.server.supervisor import StartupError, migrate_database
from tests.conftest import make_settings

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _execute(url: str, *statements: str) -> list[tuple[object, ...]]:
    """Run the statements in one transaction; the last one's rows (a SELECT's), or none."""
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.begin() as connection:
            results = [connection.execute(text(statement)) for statement in statements]
            last = results[-1]
            return [tuple(row) for row in last] if last.returns_rows else []
    finally:
        engine.dispose()


def test_a_replica_older_than_the_schema_refuses_to_start_naming_the_release_it_needs(
    database_url: str, redis_server: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, redis_server)
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    migrate_database(settings)  # the migrating server names itself as the release of the schema's revision
    assert _execute(database_url, "SELECT release, revision FROM schema_release") == [(server_version(), head)]

    # A newer release migrated the database on: a revision this code does not have, and that release's row.
    _execute(
        database_url,
        "UPDATE alembic_version SET version_num = '9001'",
        "UPDATE schema_release SET release = '9.1.0', revision = '9001'",
    )
    with pytest.raises(StartupError) as refused:
        migrate_database(settings)
    message = str(refused.value)
    assert "schema is at revision 9001" in message and f"knows revisions up to {head}" in message
    assert "needs slipway 9.1.0 or newer" in message
    # Nothing was changed by the refusal: the newer release's record stands.
    assert _execute(database_url, "SELECT release, revision FROM schema_release") == [("9.1.0", "9001")]

    # A schema moved on by a release that kept no record (the row names another revision): still refused, plainly.
    _execute(database_url, "UPDATE schema_release SET revision = '9000'")
    with pytest.raises(StartupError, match="revision 9001, newer than this release .* it needs a newer release"):
        migrate_database(settings)
