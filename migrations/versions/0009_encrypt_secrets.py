"""secrets in the database are encrypted (variable values, Terraform state, agent definitions); the keys table

Encrypted: template versions' user variable values, builds' Terraform state and agents' definitions (their env
and scripts; the env, startup_script and shutdown_script columns that repeated them are dropped). No longer kept:
sensitive variables' defaults and sensitive resource metadata values.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 10:00:00

The keyring is the running app's (Flask-Migrate migrates in its app context): the first configured key, else the
one derived from the secret key. The downgrade decrypts everything again (and so needs the keys); the dropped
sensitive defaults and metadata values do not come back.

Columns change type by add, fill, drop, rename rather than by Alembic's batch mode: on SQLite that mode copies the
table and drops the old one, and dropping a table that others reference ON DELETE CASCADE (workspace_agents) deletes
their rows.
"""

import json

import sqlalchemy as sa
from alembic import op

import app.core.columns
from app.core.crypto import current_keyring


# revision identifiers, used by Alembic.
revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BATCH = 100


def upgrade():
    op.create_table(
        "encryption_keys",
        sa.Column("key_id", sa.String(length=8), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", app.core.columns.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", app.core.columns.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_encryption_keys")),
        sa.UniqueConstraint("digest", name=op.f("uq_encryption_keys_digest")),
    )
    keyring = current_keyring()
    keys = sa.table(
        "encryption_keys",
        sa.column("key_id", sa.String),
        sa.column("digest", sa.String),
        sa.column("created_at", app.core.columns.UTCDateTime(timezone=True)),
    )
    op.get_bind().execute(
        keys.insert().values(
            key_id=keyring.active.key_id, digest=keyring.active.digest, created_at=app.core.columns.utcnow()
        )
    )

    def encrypt_json(value):
        return keyring.encrypt(json.dumps(value, separators=(",", ":")).encode())

    _change_column("template_versions", "user_variable_values", sa.JSON(), sa.LargeBinary(), encrypt_json)
    _change_column(
        "workspace_agents",
        "definition",
        sa.JSON(),
        sa.LargeBinary(),
        encrypt_json,
        extra=("env", "startup_script", "shutdown_script"),
        merge=_definition_with_columns,
    )
    for name in ("env", "startup_script", "shutdown_script"):
        op.drop_column("workspace_agents", name)
    _rewrite("workspace_builds", "state", sa.LargeBinary(), lambda value: keyring.encrypt(bytes(value)))
    _rewrite("template_versions", "variables", sa.JSON(), _without_sensitive_defaults)
    _rewrite("workspace_resources", "metadata_items", sa.JSON(), _without_sensitive_values)


def downgrade():
    keyring = current_keyring()

    def decrypt_json(value):
        return json.loads(keyring.decrypt(bytes(value)))

    _rewrite("workspace_builds", "state", sa.LargeBinary(), lambda value: keyring.decrypt(bytes(value)))
    op.add_column("workspace_agents", sa.Column("env", sa.JSON(), nullable=False, server_default="{}"))
    op.add_column("workspace_agents", sa.Column("startup_script", sa.Text(), nullable=False, server_default=""))
    op.add_column("workspace_agents", sa.Column("shutdown_script", sa.Text(), nullable=False, server_default=""))
    _change_column(
        "workspace_agents", "definition", sa.LargeBinary(), sa.JSON(), decrypt_json, split=_columns_from_definition
    )
    _change_column("template_versions", "user_variable_values", sa.LargeBinary(), sa.JSON(), decrypt_json)
    op.drop_table("encryption_keys")


def _change_column(table_name, name, old_type, new_type, convert, *, extra=(), merge=None, split=None):
    """Give a column a new type and convert every value: add the new column, fill it, drop the old, rename."""
    new_name = f"{name}_converted"
    empty = sa.text("X''") if isinstance(new_type, sa.LargeBinary) else sa.text("'[]'")
    if op.get_bind().dialect.name == "postgresql" and isinstance(new_type, sa.LargeBinary):
        empty = sa.text("'\\x'::bytea")
    op.add_column(table_name, sa.Column(new_name, new_type, nullable=False, server_default=empty))
    extra_columns = [sa.column(column, sa.JSON() if column == "env" else sa.Text()) for column in extra]
    split_columns = (
        [
            sa.column(column, sa.JSON() if column == "env" else sa.Text())
            for column in ("env", "startup_script", "shutdown_script")
        ]
        if split
        else []
    )
    target = sa.table(
        table_name,
        sa.column("id", sa.String),
        sa.column(name, old_type),
        sa.column(new_name, new_type),
        *extra_columns,
        *split_columns,
    )
    connection = op.get_bind()
    for ids in _id_batches(connection, target):
        rows = connection.execute(
            sa.select(target.c.id, target.c[name], *(target.c[column.name] for column in extra_columns)).where(
                target.c.id.in_(ids)
            )
        ).all()
        for row in rows:
            value = row[1]
            if merge is not None:
                value = merge(value, dict(zip(extra, row[2:])))
            values = {new_name: convert(value)}
            if split is not None:
                values.update(split(values[new_name]))
            connection.execute(target.update().where(target.c.id == row[0]).values(values))
    op.drop_column(table_name, name)
    op.alter_column(table_name, new_name, new_column_name=name)
    if connection.dialect.name == "postgresql":
        op.alter_column(table_name, name, server_default=None)


def _rewrite(table_name, name, value_type, convert):
    """Convert every value of a column in place (its type stays)."""
    target = sa.table(table_name, sa.column("id", sa.String), sa.column(name, value_type))
    connection = op.get_bind()
    for ids in _id_batches(connection, target):
        rows = connection.execute(
            sa.select(target.c.id, target.c[name]).where(target.c.id.in_(ids), target.c[name].is_not(None))
        ).all()
        for row_id, value in rows:
            connection.execute(target.update().where(target.c.id == row_id).values({name: convert(value)}))


def _id_batches(connection, target):
    # Ids first, values a batch at a time: a Terraform state can be megabytes, and there may be thousands.
    ids = list(connection.execute(sa.select(target.c.id).order_by(target.c.id)).scalars())
    for start in range(0, len(ids), BATCH):
        yield ids[start : start + BATCH]


def _load(value):
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _definition_with_columns(definition, columns):
    """The agent's definition, with what the dropped columns held in case an older row's definition lacks it."""
    definition = dict(_load(definition) or {})
    env = _load(columns.get("env")) or {}
    if env and not definition.get("env"):
        definition["env"] = env
    for script in ("startup_script", "shutdown_script"):
        if columns.get(script) and not definition.get(script):
            definition[script] = columns[script]
    return definition


def _columns_from_definition(definition):
    return {
        "env": definition.get("env") or {},
        "startup_script": definition.get("startup_script") or "",
        "shutdown_script": definition.get("shutdown_script") or "",
    }


def _without_sensitive_defaults(variables):
    variables = _load(variables) or []
    return [
        {**item, "default_value": ""} if isinstance(item, dict) and item.get("sensitive") else item
        for item in variables
    ]


def _without_sensitive_values(items):
    items = _load(items) or []
    return [{**item, "value": ""} if isinstance(item, dict) and item.get("sensitive") else item for item in items]
