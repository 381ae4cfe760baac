"""templates can be deprecated (a message; no new workspaces) and deleted (kept for the history of deleted
workspaces, under a name nobody can type, so the name is free again)

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27 03:30:00.000000

"""
import sqlalchemy as sa
from alembic import op

import app.core.columns


# revision identifiers, used by Alembic.
revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('templates', schema=None) as batch_op:
        batch_op.add_column(sa.Column('deprecation_message', sa.Text(), server_default='', nullable=False))
        batch_op.add_column(sa.Column('deleted_at', app.core.columns.UTCDateTime(timezone=True), nullable=True))


def downgrade():
    with op.batch_alter_table('templates', schema=None) as batch_op:
        batch_op.drop_column('deleted_at')
        batch_op.drop_column('deprecation_message')
