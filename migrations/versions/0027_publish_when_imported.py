"""a template version remembers which template it becomes the active version of once its import succeeds, so an
upload publishes without a second step

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27 03:10:00.000000

"""
import sqlalchemy as sa
from alembic import op


# revision identifiers, used by Alembic.
revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('publish_as', sa.String(length=32), server_default='', nullable=False))


def downgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.drop_column('publish_as')
