"""prebuilt workspaces: the prebuilds system user, who owns them until a person claims one (no password, login type
none, no organisation membership; app/users/models.py PREBUILDS_USER_ID), and the reconciler's settings (one row)

Revision ID: 0048
Revises: 0047
Create Date: 2026-11-28 15:10:00.000000

"""

from datetime import datetime, timezone

from alembic import op
import sqlalchemy as sa

import app.core.columns


# revision identifiers, used by Alembic.
revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None

PREBUILDS_USER_ID = "5e1f0b1d-0c2a-4f6e-9b8d-7a3c2e1f0b42"


def upgrade():
    op.create_table(
        "prebuilds_settings",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("reconciliation_paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("updated_at", app.core.columns.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prebuilds_settings")),
    )
    users = sa.table(
        "users",
        sa.column("id", sa.String(36)),
        sa.column("username", sa.String(32)),
        sa.column("email", sa.String(254)),
        sa.column("password_hash", sa.String(255)),
        sa.column("roles", sa.JSON()),
        sa.column("status", sa.String(16)),
        sa.column("login_type", sa.String(16)),
        sa.column("created_at", app.core.columns.UTCDateTime(timezone=True)),
        sa.column("updated_at", app.core.columns.UTCDateTime(timezone=True)),
        sa.column("must_change_password", sa.Boolean()),
    )
    now = datetime.now(timezone.utc)
    op.bulk_insert(users, [{
        "id": PREBUILDS_USER_ID, "username": "prebuilds", "email": "prebuilds@system.slipway.invalid",
        "password_hash": None, "roles": [], "status": "active", "login_type": "none",
        "created_at": now, "updated_at": now, "must_change_password": False,
    }])


def downgrade():
    op.execute(sa.text("DELETE FROM users WHERE id = :id").bindparams(id=PREBUILDS_USER_ID))
    op.drop_table("prebuilds_settings")
