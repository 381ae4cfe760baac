"""logs at volume: one job's lines found by (job_id, id); unfinished jobs by a partial index; log batches numbered
(a batch sent again is stored once)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 18:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_job_logs', schema=None) as batch_op:
        batch_op.create_index('ix_provisioner_job_logs_job_id_id', ['job_id', 'id'], unique=False)
        batch_op.drop_index('ix_provisioner_job_logs_job_id')
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('log_lines_received', sa.Integer(), server_default='0', nullable=False))
    op.create_index(
        'ix_provisioner_jobs_unfinished',
        'provisioner_jobs',
        ['created_at'],
        unique=False,
        sqlite_where=sa.text('completed_at IS NULL'),
        postgresql_where=sa.text('completed_at IS NULL'),
    )


def downgrade():
    op.drop_index('ix_provisioner_jobs_unfinished', table_name='provisioner_jobs')
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.drop_column('log_lines_received')
    with op.batch_alter_table('provisioner_job_logs', schema=None) as batch_op:
        batch_op.create_index('ix_provisioner_job_logs_job_id', ['job_id'], unique=False)
        batch_op.drop_index('ix_provisioner_job_logs_job_id_id')
