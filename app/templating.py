"""Jinja helpers shared by every page."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Flask


def init_app(app: Flask) -> None:
    app.jinja_env.filters["ago"] = time_ago
    app.jinja_env.globals["product_name"] = "Slipway"


def time_ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    seconds = int((datetime.now(UTC) - value).total_seconds())
    if seconds < 60:
        return "just now"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "just now"
