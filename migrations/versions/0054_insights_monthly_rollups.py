"""insights: monthly rollups of people and apps (a year's range reads twelve months of them, not 365 days),
backfilled from the daily rows

Revision ID: 0054
Revises: 0053
Create Date: 2026-11-29 01:40:00.000000

"""

from datetime import date

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0054"
down_revision = "0053"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "template_user_monthly",
        sa.Column("template_id", sa.String(length=36), nullable=False),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("user_id", sa.String(length=36), nullable=False),
        sa.Column("seconds", sa.Integer(), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("template_id", "month", "user_id", name=op.f("pk_template_user_monthly")),
    )
    op.create_index("ix_template_user_monthly_month_user_id", "template_user_monthly", ["month", "user_id"])
    op.create_table(
        "template_app_monthly",
        sa.Column("template_id", sa.String(length=36), nullable=False),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("template_id", "month", "kind", "slug", name=op.f("pk_template_app_monthly")),
    )
    op.create_index("ix_template_app_monthly_month", "template_app_monthly", ["month"])
    _backfill()


def _backfill():
    """One grouped INSERT … SELECT per month that has daily rows, the month given as a parameter (the two databases
    truncate dates to months differently; a literal needs neither)."""
    bind = op.get_bind()
    first, last = bind.execute(sa.text("SELECT min(day), max(day) FROM template_user_daily")).one()
    app_first, app_last = bind.execute(sa.text("SELECT min(day), max(day) FROM template_app_daily")).one()
    bounds = [_as_date(value) for value in (first, last, app_first, app_last) if value is not None]
    if not bounds:
        return
    month = min(bounds).replace(day=1)
    while month <= max(bounds):
        following = date(month.year + month.month // 12, month.month % 12 + 1, 1)
        days = {"month": month, "first": month, "following": following}
        bind.execute(
            sa.text(
                "INSERT INTO template_user_monthly (template_id, month, user_id, seconds, days) "
                "SELECT template_id, :month, user_id, sum(seconds), count(*) FROM template_user_daily "
                "WHERE day >= :first AND day < :following GROUP BY template_id, user_id"
            ).bindparams(*_dates),
            days,
        )
        bind.execute(
            sa.text(
                "INSERT INTO template_app_monthly (template_id, month, kind, slug, sessions, seconds) "
                "SELECT template_id, :month, kind, slug, sum(sessions), sum(seconds) FROM template_app_daily "
                "WHERE day >= :first AND day < :following GROUP BY template_id, kind, slug"
            ).bindparams(*_dates),
            days,
        )
        month = following


# Typed, so that each driver is given a date its own way (SQLite stores them as ISO text).
_dates = [sa.bindparam(name, type_=sa.Date()) for name in ("month", "first", "following")]


def _as_date(value):
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


def downgrade():
    op.drop_index("ix_template_app_monthly_month", table_name="template_app_monthly")
    op.drop_table("template_app_monthly")
    op.drop_index("ix_template_user_monthly_month_user_id", table_name="template_user_monthly")
    op.drop_table("template_user_monthly")
