"""Alembic environment for Slipway: the engine and metadata come from the Flask app running the upgrade."""

import logging
from logging.config import fileConfig

from alembic import context
from flask import current_app

config = context.config
# Keep loggers configured before migrations (the server's own) alive.
fileConfig(config.config_file_name, disable_existing_loggers=False)
logger = logging.getLogger("alembic.env")

database = current_app.extensions["migrate"].db
config.set_main_option("sqlalchemy.url", database.engine.url.render_as_string(hide_password=False).replace("%", "%%"))


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=database.metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    def skip_empty_revisions(context, revision, directives):  # type: ignore[no-untyped-def]
        if getattr(config.cmd_opts, "autogenerate", False) and directives[0].upgrade_ops.is_empty():
            directives[:] = []
            logger.info("No changes in schema detected.")

    configure_args = dict(current_app.extensions["migrate"].configure_args)
    configure_args.setdefault("process_revision_directives", skip_empty_revisions)
    with database.engine.connect() as connection:
        # Batch mode rebuilds a SQLite table by copy, drop and rename, and with foreign keys on, dropping the old
        # table deletes the rows that reference it ON DELETE CASCADE (0008 emptied job logs and resources so). The
        # pragma does nothing inside a transaction: off before the migrations, on again after.
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        try:
            context.configure(connection=connection, target_metadata=database.metadata, **configure_args)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            if sqlite:
                connection.rollback()
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
