"""each agent's last connection events (connected, disconnected), shown on the workspace page

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27 03:30:00.000000

"""
from alembic import op
import sqlalchemy as sa

import app.core.columns


# revision identifiers, used by Alembic.
revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('workspace_agent_connection_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('agent_id', sa.String(length=36), nullable=False),
    sa.Column('event', sa.String(length=16), nullable=False),
    sa.Column('connection_id', sa.String(length=36), nullable=False),
    sa.Column('at', app.core.columns.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['agent_id'], ['workspace_agents.id'], name=op.f('fk_workspace_agent_connection_events_agent_id_workspace_agents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workspace_agent_connection_events'))
    )
    with op.batch_alter_table('workspace_agent_connection_events', schema=None) as batch_op:
        batch_op.create_index('ix_workspace_agent_connection_events_agent_id_id', ['agent_id', 'id'], unique=False)


def downgrade():
    with op.batch_alter_table('workspace_agent_connection_events', schema=None) as batch_op:
        batch_op.drop_index('ix_workspace_agent_connection_events_agent_id_id')
    op.drop_table('workspace_agent_connection_events')
