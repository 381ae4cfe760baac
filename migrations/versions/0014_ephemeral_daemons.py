"""provisioner daemons started with --once or --idle-exit are marked ephemeral

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 11:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_daemons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('ephemeral', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade():
    with op.batch_alter_table('provisioner_daemons', schema=None) as batch_op:
        batch_op.drop_column('ephemeral')
