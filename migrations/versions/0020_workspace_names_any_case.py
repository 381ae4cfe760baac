"""workspace names are unique per owner in any case ("Dev" and "dev" are one name): a name_key column (the lower
case name) carries the unique index; duplicates that raced in before are renamed with a number, never deleted

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 18:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None

NAME_MAX = 32


def _rename_case_duplicates():
    """Keep the oldest workspace of each (owner, lower(name)); the others become name-2, name-3 ... (free names)."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.text("SELECT id, owner_id, name FROM workspaces WHERE deleted = :no ORDER BY created_at, id"), {"no": False}
    ).all()
    taken = {(owner_id, name.lower()) for _, owner_id, name in rows}
    seen = set()
    for workspace_id, owner_id, name in rows:
        key = (owner_id, name.lower())
        if key not in seen:
            seen.add(key)
            continue
        number = 2
        while True:
            suffix = f"-{number}"
            candidate = name[: NAME_MAX - len(suffix)].rstrip("-") + suffix
            if (owner_id, candidate.lower()) not in taken:
                break
            number += 1
        taken.add((owner_id, candidate.lower()))
        connection.execute(
            sa.text("UPDATE workspaces SET name = :name WHERE id = :id"), {"name": candidate, "id": workspace_id}
        )


def upgrade():
    _rename_case_duplicates()
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.add_column(sa.Column('name_key', sa.String(length=32), server_default='', nullable=False))
    op.execute("UPDATE workspaces SET name_key = lower(name)")
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.alter_column('name_key', server_default=None)
        batch_op.drop_index('uq_workspaces_owner_id_name', sqlite_where=sa.text('deleted = 0'), postgresql_where=sa.text('deleted = false'))
        batch_op.create_index('uq_workspaces_owner_id_name_key', ['owner_id', 'name_key'], unique=True, sqlite_where=sa.text('deleted = 0'), postgresql_where=sa.text('deleted = false'))


def downgrade():
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.drop_index('uq_workspaces_owner_id_name_key', sqlite_where=sa.text('deleted = 0'), postgresql_where=sa.text('deleted = false'))
        batch_op.create_index('uq_workspaces_owner_id_name', ['owner_id', 'name'], unique=True, sqlite_where=sa.text('deleted = 0'), postgresql_where=sa.text('deleted = false'))
        batch_op.drop_column('name_key')
