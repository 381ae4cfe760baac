"""template versions keep the tags their builds compute from parameters (data "coder_workspace_tags")

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 16:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('workspace_tags', sa.JSON(), server_default='{}', nullable=False))


def downgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.drop_column('workspace_tags')
