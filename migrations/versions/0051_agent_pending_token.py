"""workspace agents: the token a claimed prebuild's running agent is handed (encrypted) until it has it

Revision ID: 0051
Revises: 0050
Create Date: 2026-11-28 21:40:00.000000

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("workspace_agents") as batch_op:
        batch_op.add_column(sa.Column("pending_token", sa.LargeBinary(), nullable=True))


def downgrade():
    with op.batch_alter_table("workspace_agents") as batch_op:
        batch_op.drop_column("pending_token")
