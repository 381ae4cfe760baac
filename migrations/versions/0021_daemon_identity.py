"""provisioner daemons are known by an identity kept in their cache dir, not by their name

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 19:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_daemons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('instance_id', sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f('ix_provisioner_daemons_instance_id'), ['instance_id'], unique=False)


def downgrade():
    with op.batch_alter_table('provisioner_daemons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_provisioner_daemons_instance_id'))
        batch_op.drop_column('instance_id')
