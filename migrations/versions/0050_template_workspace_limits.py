"""templates: at most N workspaces per person (0: no limit) and a budget of their own for prebuilds (0: none);
workspace builds: the daily cost their quota check accepted

Revision ID: 0050
Revises: 0049
Create Date: 2026-11-28 15:20:00.000000

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0050"
down_revision = "0049"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("templates") as batch_op:
        batch_op.add_column(sa.Column("max_workspaces_per_person", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("prebuild_budget", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("workspace_builds") as batch_op:
        batch_op.add_column(sa.Column("daily_cost", sa.Integer(), nullable=True))


def downgrade():
    with op.batch_alter_table("workspace_builds") as batch_op:
        batch_op.drop_column("daily_cost")
    with op.batch_alter_table("templates") as batch_op:
        batch_op.drop_column("prebuild_budget")
        batch_op.drop_column("max_workspaces_per_person")
