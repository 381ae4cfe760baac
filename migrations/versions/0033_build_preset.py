"""a build records the template version preset it was made with (Coder's template_version_preset_id)

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-27 07:40:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0033'
down_revision = '0032'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('workspace_builds', schema=None) as batch_op:
        batch_op.add_column(sa.Column('template_version_preset_id', sa.String(length=36), nullable=True))


def downgrade():
    with op.batch_alter_table('workspace_builds', schema=None) as batch_op:
        batch_op.drop_column('template_version_preset_id')
