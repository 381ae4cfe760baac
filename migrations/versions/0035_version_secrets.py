"""a template version records the secrets it declares (data "coder_secret"): its builds get only those

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-27 20:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0035'
down_revision = '0034'
branch_labels = None
depends_on = None


def upgrade():
    # NULL for the versions imported before: nothing was recorded, and their builds keep getting every secret of
    # the owner's until the template is pushed again (every new import records a list, empty or not).
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('secrets', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.drop_column('secrets')
