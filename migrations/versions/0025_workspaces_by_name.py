"""workspaces are listed by name a page at a time: an index on (name_key, id)

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27 03:20:00.000000

"""
from alembic import op


# revision identifiers, used by Alembic.
revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.create_index('ix_workspaces_name_key_id', ['name_key', 'id'], unique=False)


def downgrade():
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.drop_index('ix_workspaces_name_key_id')
