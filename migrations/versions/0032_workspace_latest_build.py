"""a workspace keeps its newest build's id, so that filtering by the latest build's status reads one build each

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-27 07:20:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0032'
down_revision = '0031'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.add_column(sa.Column('latest_build_id', sa.String(length=36), nullable=True))
    # Every workspace has at least its first build; the newest is the highest number.
    op.execute(
        "UPDATE workspaces SET latest_build_id = (SELECT b.id FROM workspace_builds b WHERE b.workspace_id ="
        " workspaces.id ORDER BY b.build_number DESC LIMIT 1)"
    )


def downgrade():
    with op.batch_alter_table('workspaces', schema=None) as batch_op:
        batch_op.drop_column('latest_build_id')
