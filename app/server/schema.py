"""Bringing the database to the current schema: a new database in one step, an existing one by its migrations.

Walking a new database through every migration (38 and counting, several of which rebuild SQLite tables by copy)
took most of a first start. A database with no tables is instead created from the models at once and stamped at
the migrations' head, with the rows the migrations seed; tests/test_schema_from_models.py proves that this gives
the same schema as the migrations, on SQLite and PostgreSQL. A database with tables is always upgraded by its
migrations, which alone know how to carry its rows along.

`slipway server` does this in a small app of its own (:func:`schema_app`: the database, the keyring, Alembic) rather
than the whole dashboard: an existing database at the head then costs the server start none of the views' imports,
which the web workers make anyway.
"""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory
from flask import Flask
from flask_migrate import Migrate, stamp, upgrade
from sqlalchemy import column, func, insert, inspect, select, table

from app.audit.models import CHAIN_HEAD_ID, GENESIS_HASH, AuditChainHead
from app.core import encryption_keys
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db, engine_options
from app.core.schema_release import SINGLETON_ID, SchemaRelease
from app.core.version import server_version
from app.groups.models import EVERYONE, Group
from app.organizations.models import DEFAULT_ORGANIZATION_ID, DEFAULT_ORGANIZATION_NAME, Organization
from app.users.models import (
    LOGIN_TYPE_NONE,
    PREBUILDS_EMAIL,
    PREBUILDS_USER_ID,
    PREBUILDS_USERNAME,
    SYSTEM_USER_IDS,
    User,
)

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def schema_app(settings: Settings) -> Flask:
    """An app with what migrating and the start-up checks need, and nothing of the dashboard."""
    app = Flask(__name__)
    app.config.update(
        SLIPWAY_SETTINGS=settings,
        SECRET_KEY=settings.secret_key,
        SQLALCHEMY_DATABASE_URI=settings.database_url,
        SQLALCHEMY_ENGINE_OPTIONS=engine_options(settings.database_url),
    )
    db.init_app(app)
    encryption_keys.init_app(app, settings)
    Migrate(app, db, directory=str(MIGRATIONS_DIR))
    return app


def user_count() -> int:
    """How many people have accounts, read without the users' model (and so without every model it relates to);
    system users (``prebuilds``) are not people."""
    users = table("users", column("id"))
    return db.session.scalar(select(func.count()).select_from(users).where(users.c.id.not_in(SYSTEM_USER_IDS))) or 0


class SchemaTooNew(Exception):
    """The database's schema is at a revision this release does not have: a newer release migrated it."""


def bring_schema_to_head() -> bool:
    """Create or upgrade the database of the current app; returns True when it was created from the models.

    Refuses (SchemaTooNew) a database a newer release migrated: this release would neither know how to upgrade it
    nor be able to read it safely, and says which release it needs."""
    tables = inspect(db.engine).get_table_names()
    if tables:
        check_schema_not_newer(tables)
        upgrade()
        created = False
    else:
        create_schema_from_models()
        created = True
    record_release()
    return created


def check_schema_not_newer(tables: list[str]) -> None:
    if "alembic_version" not in tables:
        return
    scripts = ScriptDirectory(str(MIGRATIONS_DIR))
    known = {script.revision for script in scripts.walk_revisions()}
    current = db.session.scalar(select(table("alembic_version", column("version_num"))))
    db.session.rollback()  # a read: no transaction left open across the migrations
    if current is None or current in known:
        return
    needed = "a newer release"
    if "schema_release" in tables:
        row = db.session.get(SchemaRelease, SINGLETON_ID)
        db.session.rollback()
        if row is not None and row.revision == current:
            needed = f"slipway {row.release} or newer"
    raise SchemaTooNew(
        f"the database's schema is at revision {current}, newer than this release (slipway {server_version()}, "
        f"which knows revisions up to {scripts.get_current_head()}): it needs {needed}. Run that release's image; "
        "a schema is never migrated back (to go back, restore the backup taken before the upgrade)"
    )


def record_release() -> None:
    """Name this release as the one that brought the schema to its revision, when it is the first to serve at that
    revision: a later release on the same schema leaves the row alone, so it names the oldest release that will do."""
    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head() or ""
    row = db.session.get(SchemaRelease, SINGLETON_ID)
    if row is None:
        db.session.add(SchemaRelease(id=SINGLETON_ID, release=server_version(), revision=head))
    elif row.revision != head:
        row.release, row.revision = server_version(), head
    db.session.commit()


def create_schema_from_models() -> None:
    """Create every table of an empty database from the models, seed what the migrations seed, and stamp it at the
    head, so that later migrations apply to it as to any other."""
    import app.factory  # noqa: F401 - every feature's models, so that the metadata holds every table

    db.create_all()
    seed_rows()
    db.session.commit()
    stamp()


def seed_rows() -> None:
    """The rows migrations insert into an empty database: the default organisation and its Everyone group (0038),
    the audit chain's head (0042) and the ``prebuilds`` system user (0048). Written as the migrations write them,
    below the session, so that they are not audited changes: a database made from the models starts with the same
    rows and the same empty audit log."""
    now = utcnow()
    connection = db.session.connection()
    connection.execute(
        insert(Organization).values(
            id=DEFAULT_ORGANIZATION_ID,
            name=DEFAULT_ORGANIZATION_NAME,
            display_name="Default",
            is_default=True,
            created_at=now,
            updated_at=now,
        )
    )
    connection.execute(
        insert(Group).values(
            id=DEFAULT_ORGANIZATION_ID,
            organization_id=DEFAULT_ORGANIZATION_ID,
            name=EVERYONE,
            created_at=now,
            updated_at=now,
        )
    )
    connection.execute(
        insert(AuditChainHead).values(
            id=CHAIN_HEAD_ID, last_seq=0, last_hash=GENESIS_HASH, base_seq=0, base_hash=GENESIS_HASH
        )
    )
    connection.execute(insert(User).values(**prebuilds_user_row(now)))


def prebuilds_user_row(now: object) -> dict[str, object]:
    """The ``prebuilds`` system user's row, as migration 0048 writes it (no organisation membership: in no group)."""
    return {
        "id": PREBUILDS_USER_ID,
        "username": PREBUILDS_USERNAME,
        "email": PREBUILDS_EMAIL,
        "password_hash": None,
        "roles": [],
        "status": "active",
        "login_type": LOGIN_TYPE_NONE,
        "created_at": now,
        "updated_at": now,
        "must_change_password": False,
    }
