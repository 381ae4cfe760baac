"""a failed job's error lines are found by a partial index on (job_id, id) where level = 'error'

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27 03:50:00.000000

"""
import sqlalchemy as sa
from alembic import op


# revision identifiers, used by Alembic.
revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade():
    op.create_index(
        'ix_provisioner_job_logs_errors',
        'provisioner_job_logs',
        ['job_id', 'id'],
        unique=False,
        sqlite_where=sa.text("level = 'error'"),
        postgresql_where=sa.text("level = 'error'"),
    )


def downgrade():
    op.drop_index('ix_provisioner_job_logs_errors', table_name='provisioner_job_logs')
