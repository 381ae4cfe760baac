"""provisioner jobs: the organisation whose daemons run them (every existing job is the default organisation's)

Revision ID: 0052
Revises: 0051
Create Date: 2026-11-28 21:50:00.000000

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0052"
down_revision = "0051"
branch_labels = None
depends_on = None

DEFAULT_ORGANIZATION_ID = "00000000-0000-4000-8000-000000000001"


def upgrade():
    with op.batch_alter_table("provisioner_jobs") as batch_op:
        batch_op.add_column(
            sa.Column(
                "organization_id",
                sa.String(36),
                sa.ForeignKey(
                    "organizations.id",
                    name=op.f("fk_provisioner_jobs_organization_id_organizations"),
                    ondelete="CASCADE",
                ),
                server_default=DEFAULT_ORGANIZATION_ID,
                nullable=False,
            )
        )


def downgrade():
    with op.batch_alter_table("provisioner_jobs") as batch_op:
        batch_op.drop_constraint(op.f("fk_provisioner_jobs_organization_id_organizations"), type_="foreignkey")
        batch_op.drop_column("organization_id")
