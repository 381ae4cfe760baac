"""build timings: each job's stages and resources as its daemon measured them, and each agent script's run

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-27 23:20:00.000000

"""
from alembic import op
import sqlalchemy as sa

import app.core.columns


# revision identifiers, used by Alembic.
revision = '0036'
down_revision = '0035'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('provisioner_job_timings',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=36), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('source', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('resource', sa.String(length=512), nullable=False),
    sa.Column('started_at', app.core.columns.UTCDateTime(timezone=True), nullable=False),
    sa.Column('ended_at', app.core.columns.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['provisioner_jobs.id'], name=op.f('fk_provisioner_job_timings_job_id_provisioner_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_provisioner_job_timings'))
    )
    with op.batch_alter_table('provisioner_job_timings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_provisioner_job_timings_job_id'), ['job_id'], unique=False)

    op.create_table('workspace_agent_script_timings',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('agent_id', sa.String(length=36), nullable=False),
    sa.Column('log_source_id', sa.String(length=64), nullable=False),
    sa.Column('stage', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=False),
    sa.Column('started_at', app.core.columns.UTCDateTime(timezone=True), nullable=False),
    sa.Column('ended_at', app.core.columns.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['agent_id'], ['workspace_agents.id'], name=op.f('fk_workspace_agent_script_timings_agent_id_workspace_agents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workspace_agent_script_timings'))
    )
    with op.batch_alter_table('workspace_agent_script_timings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_workspace_agent_script_timings_agent_id'), ['agent_id'], unique=False)


def downgrade():
    with op.batch_alter_table('workspace_agent_script_timings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_workspace_agent_script_timings_agent_id'))
    op.drop_table('workspace_agent_script_timings')
    with op.batch_alter_table('provisioner_job_timings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_provisioner_job_timings_job_id'))
    op.drop_table('provisioner_job_timings')
