from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Date, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, utcnow
from app.core.extensions import Model


class TemplateUsageDaily(Model):
    """One template's usage on one UTC day, recomputed by the rollup job for the recent days only, so the
    Insights API and page read a year as 365 rows per template rather than every build and connection."""

    __tablename__ = "template_usage_daily"
    __table_args__ = (Index("ix_template_usage_daily_day", "day"),)

    template_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    # Distinct people with a connection-log session (SSH, terminal, port, app) on this day.
    active_users: Mapped[int] = mapped_column(Integer, default=0)
    builds: Mapped[int] = mapped_column(Integer, default=0)
    builds_succeeded: Mapped[int] = mapped_column(Integer, default=0)
    builds_failed: Mapped[int] = mapped_column(Integer, default=0)
    # Seconds; None when no build (or no agent became ready) that day.
    build_p50_seconds: Mapped[float | None] = mapped_column(Float)
    build_p95_seconds: Mapped[float | None] = mapped_column(Float)
    ready_p50_seconds: Mapped[float | None] = mapped_column(Float)
    ready_p95_seconds: Mapped[float | None] = mapped_column(Float)
    # JSON objects: app slug -> sessions, and workspace status -> count (the day's snapshot).
    app_usage: Mapped[str] = mapped_column(Text, default="{}")
    workspaces_by_status: Mapped[str] = mapped_column(Text, default="{}")
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
