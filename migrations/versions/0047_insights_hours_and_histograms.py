"""insights: the UTC hours of each person's day (daily active users in any time zone), and histograms of each
template's build and ready times (percentiles over several templates)

Revision ID: 0047
Revises: 0046
Create Date: 2026-11-28 15:00:00.000000

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None


def upgrade():
    # Rows rolled up before have no hours (0: "some time that UTC day") and no histograms (NULL); the rollup fills
    # both for the days it recomputes, and the readers say what they do without them.
    with op.batch_alter_table("template_user_daily") as batch_op:
        batch_op.add_column(sa.Column("active_hours", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("template_usage_daily") as batch_op:
        batch_op.add_column(sa.Column("build_histogram", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("ready_histogram", sa.Text(), nullable=True))


def downgrade():
    with op.batch_alter_table("template_usage_daily") as batch_op:
        batch_op.drop_column("ready_histogram")
        batch_op.drop_column("build_histogram")
    with op.batch_alter_table("template_user_daily") as batch_op:
        batch_op.drop_column("active_hours")
