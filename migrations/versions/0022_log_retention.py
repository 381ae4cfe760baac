"""log retention: when a finished job's log was trimmed to its first and last lines

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26 19:30:00.000000

"""
from alembic import op
import sqlalchemy as sa

import app.core.columns


# revision identifiers, used by Alembic.
revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('logs_trimmed_at', app.core.columns.UTCDateTime(timezone=True), nullable=True))


def downgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.drop_column('logs_trimmed_at')
