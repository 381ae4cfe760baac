"""schema_release: which release brought the schema to its revision, so that an older replica can say which release
it needs instead of failing on a revision it does not know

Revision ID: 0049
Revises: 0048
Create Date: 2026-11-28 15:10:00.000000

"""

from alembic import op
import sqlalchemy as sa

import app.core.columns


# revision identifiers, used by Alembic.
revision = "0049"
down_revision = "0048"
branch_labels = None
depends_on = None


def upgrade():
    # Filled by the server once its migrations are done (app/server/supervisor.py), not here: the release is the
    # running server's, which a migration does not know.
    op.create_table(
        "schema_release",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("release", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.String(length=32), nullable=False),
        sa.Column("updated_at", app.core.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schema_release")),
    )


def downgrade():
    op.drop_table("schema_release")
