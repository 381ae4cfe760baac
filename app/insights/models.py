from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Date, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, utcnow
from app.core.extensions import Model

# How an app was used: one of Coder's built-in ways in (SSH, the web terminal, a forwarded port) or a template's app.
KIND_BUILTIN = "builtin"
KIND_APP = "app"
# The template id of the deployment's own daily row (every template at once): what the Insights page shows by default
# is then read as one row per day, and its p50/p95 are those of all the day's builds, not a blend of templates'.
ALL_TEMPLATES = "*"


class TemplateUsageDaily(Model):
    """One template's usage on one UTC day (and the deployment's, as ALL_TEMPLATES), recomputed by the rollup job
    for the recent days only, so the Insights API and page read a year as 365 rows per template rather than every
    build and connection."""

    __tablename__ = "template_usage_daily"
    __table_args__ = (Index("ix_template_usage_daily_day", "day"),)

    template_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    # Distinct people with a connection-log session (SSH, terminal, port, app) on this day.
    active_users: Mapped[int] = mapped_column(Integer, default=0)
    # Builds queued this day, and how many of them succeeded and failed (the rest were canceled or are unfinished).
    builds: Mapped[int] = mapped_column(Integer, default=0)
    builds_succeeded: Mapped[int] = mapped_column(Integer, default=0)
    builds_failed: Mapped[int] = mapped_column(Integer, default=0)
    # Seconds; None when no build succeeded (or no started workspace's agents all became ready) that day.
    build_p50_seconds: Mapped[float | None] = mapped_column(Float)
    build_p95_seconds: Mapped[float | None] = mapped_column(Float)
    ready_p50_seconds: Mapped[float | None] = mapped_column(Float)
    ready_p95_seconds: Mapped[float | None] = mapped_column(Float)
    # The same durations as histograms (app/insights/histograms.py), which add up: the percentiles of several
    # templates at once come from their sum. None for days rolled up before the histograms existed.
    build_histogram: Mapped[str | None] = mapped_column(Text)
    ready_histogram: Mapped[str | None] = mapped_column(Text)
    # JSON object: workspace status -> count, as the rollup last saw them on this day (kept once the day is over:
    # the past cannot be asked again). "{}" for days rolled up only after they ended.
    workspaces_by_status: Mapped[str] = mapped_column(Text, default="{}")
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TemplateUserDaily(Model):
    """One person's use of one template's workspaces on one UTC day: distinct people over any range (active users,
    DAUs) and seconds per person (user activity) are sums and counts of these rows, never of the connection log."""

    __tablename__ = "template_user_daily"
    __table_args__ = (Index("ix_template_user_daily_day_user_id", "day", "user_id"),)

    template_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    user_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seconds: Mapped[int] = mapped_column(Integer, default=0)
    # Bit n set: connected at some time in the UTC hour n of the day, so that a day in another time zone (``tz_offset``)
    # is counted from these rows too. 0 for rows rolled up before the hours were kept: counted on their UTC day.
    active_hours: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class TemplateAppDaily(Model):
    """One way in (an app by its slug, or SSH, the terminal, a forwarded port) of one template on one UTC day."""

    __tablename__ = "template_app_daily"
    __table_args__ = (Index("ix_template_app_daily_day", "day"),)

    template_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), primary_key=True)
    sessions: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[int] = mapped_column(Integer, default=0)


def month_of(day: date) -> date:
    """The first day of ``day``'s month: how the monthly rows name their month."""
    return day.replace(day=1)


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


class TemplateUserMonthly(Model):
    """The sum of one person's TemplateUserDaily rows of one template in one UTC month (``month``: its first day),
    rewritten by the rollup with the days it recomputed: a long range reads its whole months here (a person a month,
    not a person a day), and still counts distinct people (one row per person, never a per-month count)."""

    __tablename__ = "template_user_monthly"
    __table_args__ = (Index("ix_template_user_monthly_month_user_id", "month", "user_id"),)

    template_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    month: Mapped[date] = mapped_column(Date, primary_key=True)
    user_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seconds: Mapped[int] = mapped_column(Integer, default=0)
    # How many days of the month the person has a daily row on.
    days: Mapped[int] = mapped_column(Integer, default=0)


class TemplateAppMonthly(Model):
    """The sum of one way in's TemplateAppDaily rows of one template in one UTC month (``month``: its first day)."""

    __tablename__ = "template_app_monthly"
    __table_args__ = (Index("ix_template_app_monthly_month", "month"),)

    template_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    month: Mapped[date] = mapped_column(Date, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), primary_key=True)
    sessions: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[int] = mapped_column(Integer, default=0)
