"""template versions record their presets (data "coder_workspace_preset")

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27 04:00:00.000000

"""
import sqlalchemy as sa
from alembic import op


# revision identifiers, used by Alembic.
revision = '0031'
down_revision = '0030'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('presets', sa.JSON(), nullable=False, server_default='[]'))


def downgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.drop_column('presets')
