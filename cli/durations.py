"""Durations and times as people type and read them in the CLI."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import click

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?$")


def parse_duration(text: str) -> timedelta:
    """``8h``, ``30m``, ``1h30m``, ``2d``."""
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise click.BadParameter(f"use a duration such as 8h, 30m, 1h30m or 2d, not {text!r}")
    days, hours, minutes = (int(part or 0) for part in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes)


def human_duration(milliseconds: int | None) -> str:
    if not milliseconds:
        return ""
    minutes = milliseconds // 60_000
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    return "".join(parts) or "0m"


def local_time(stamp: str | None) -> str:
    if not stamp:
        return ""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M %Z")
