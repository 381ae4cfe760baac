"""Extensions, created unbound; :func:`app.create_app` binds each to the application."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, cast

from flask_htmx import HTMX
from flask_login import LoginManager
from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import MetaData, event
from sqlalchemy.engine import CursorResult, Engine, Result
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    # Predictable constraint names keep Alembic migrations identical on SQLite and PostgreSQL.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


db = SQLAlchemy(model_class=Base)
# What models derive from: flask-sqlalchemy's db.Model at run time (it adds the query helpers and binds), our
# typed Base for mypy, which cannot see through the dynamic class.
if TYPE_CHECKING:
    Model = Base
else:
    Model = db.Model
login_manager = LoginManager()
csrf = CSRFProtect()
htmx = HTMX()


@event.listens_for(Engine, "connect")
def _tune_sqlite(dbapi_connection: Any, connection_record: Any) -> None:
    """WAL lets the web workers read while one writes; SQLite leaves foreign keys off unless asked."""
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


def rows_changed(result: Result[Any]) -> int:
    """How many rows an UPDATE or DELETE changed (what every claim by conditional UPDATE checks)."""
    return cast(CursorResult[Any], result).rowcount


def engine_options(database_url: str) -> dict[str, object]:
    if database_url.startswith("sqlite"):
        # Several gevent greenlets and processes share one file: wait for locks instead of failing at once.
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True, "pool_size": 10, "max_overflow": 20}
