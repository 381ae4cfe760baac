"""Bringing the database to the current schema: a new database in one step, an existing one by its migrations.

Walking a new database through every migration (38 and counting, several of which rebuild SQLite tables by copy)
took most of a first start. A database with no tables is instead created from the models at once and stamped at
the migrations' head, with the rows the migrations seed; tests/test_schema_from_models.py proves that this gives
the same schema as the migrations, on SQLite and PostgreSQL. A database with tables is always upgraded by its
migrations, which alone know how to carry its rows along.
"""

from __future__ import annotations

from flask_migrate import stamp, upgrade
from sqlalchemy import inspect

from app.core.columns import utcnow
from app.core.extensions import db
from app.groups.models import EVERYONE, Group
from app.organizations.models import DEFAULT_ORGANIZATION_ID, DEFAULT_ORGANIZATION_NAME, Organization


def bring_schema_to_head() -> bool:
    """Create or upgrade the database of the current app; returns True when it was created from the models."""
    if inspect(db.engine).get_table_names():
        upgrade()
        return False
    create_schema_from_models()
    return True


def create_schema_from_models() -> None:
    """Create every table of an empty database from the models, seed what the migrations seed, and stamp it at the
    head, so that later migrations apply to it as to any other."""
    db.create_all()
    seed_rows()
    db.session.commit()
    stamp()


def seed_rows() -> None:
    """The rows migrations insert into an empty database (0038): the default organisation and its Everyone group."""
    now = utcnow()
    db.session.add(
        Organization(
            id=DEFAULT_ORGANIZATION_ID,
            name=DEFAULT_ORGANIZATION_NAME,
            display_name="Default",
            is_default=True,
            created_at=now,
            updated_at=now,
        )
    )
    db.session.flush()  # the group refers to it, and the unit of work does not order rows by foreign keys alone
    db.session.add(
        Group(
            id=DEFAULT_ORGANIZATION_ID,
            organization_id=DEFAULT_ORGANIZATION_ID,
            name=EVERYONE,
            created_at=now,
            updated_at=now,
        )
    )
