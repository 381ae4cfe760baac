"""template versions: a message (what changed, in the pusher's words; empty for versions pushed before)

Revision ID: 0046
Revises: 0045
Create Date: 2026-11-28 12:05:00.000000

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("template_versions") as batch_op:
        batch_op.add_column(sa.Column("message", sa.Text(), server_default="", nullable=False))


def downgrade():
    with op.batch_alter_table("template_versions") as batch_op:
        batch_op.drop_column("message")
