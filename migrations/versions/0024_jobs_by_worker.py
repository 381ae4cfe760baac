"""a daemon's latest finished job is found by an index on (worker_id, completed_at), not by reading every job it
ran

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 00:10:00.000000

"""
from alembic import op


# revision identifiers, used by Alembic.
revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.create_index(
            'ix_provisioner_jobs_worker_id_completed_at', ['worker_id', 'completed_at'], unique=False
        )


def downgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_provisioner_jobs_worker_id_completed_at')
