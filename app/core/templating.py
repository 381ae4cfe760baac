"""Jinja helpers shared by every page."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath

from flask import Flask
from markupsafe import Markup

from app.core import schedule_words
from app.core.safe_urls import safe_icon_url, safe_url
from protocol.tags import format_tags
from protocol.values import format_size


def init_app(app: Flask) -> None:
    # `ago` and `duration` give <time> elements that static/slipway.js keeps current.
    app.jinja_env.filters["ago"] = time_ago_element
    app.jinja_env.globals["product_name"] = "Slipway"
    app.jinja_env.filters["duration"] = duration_element
    app.jinja_env.filters["tags"] = format_tags
    app.jinja_env.filters["tag_flags"] = tag_flags
    app.jinja_env.filters["size"] = format_size
    app.jinja_env.filters["list_items"] = list_items
    # Every schedule people read (autostart, quiet hours) is said the same way: "Weekdays at 09:00, Lisbon time".
    app.jinja_env.filters["schedule_sentence"] = schedule_words.sentence
    # Every URL a template, agent or daemon chose goes through one of these before it becomes a link or an image.
    app.jinja_env.filters["safe_url"] = safe_url
    app.jinja_env.filters["safe_icon_url"] = safe_icon_url


def list_items(value: str) -> list[str]:
    """A list(string) parameter's value (a JSON array) as its items; none when it is not one (still being typed)."""
    try:
        items = json.loads(value)
    except ValueError:
        return []
    return [str(item) for item in items] if isinstance(items, list) else []


def tag_flags(tags: Mapping[str, str]) -> str:
    """The `slipway provisionerd start` flags for a daemon that can take jobs with these tags."""
    return " ".join(
        f"--tag {key}={value}"
        for key, value in sorted(tags.items())
        if key != "owner" and (key != "scope" or value == "user")
    )


def duration(start: datetime | None, end: datetime | None = None) -> str:
    if start is None:
        return ""
    seconds = _elapsed_seconds(start, end)
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _elapsed_seconds(start: datetime, end: datetime | None) -> int:
    """From ``start`` to ``end``, or to now while it has none."""
    return int(((end or datetime.now(UTC)) - start).total_seconds())


def exact_time(value: datetime) -> str:
    """What a hover shows: the exact instant, in UTC as every other time on the dashboard."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def time_ago_element(value: datetime | None) -> Markup | str:
    """``3 minutes ago`` (or ``in 3 minutes``) in a <time> element the script refreshes (``data-ago``), with the
    exact time on hover."""
    if value is None:
        return "never"
    return Markup('<time datetime="{}" title="{}" data-ago>{}</time>').format(
        _iso(value), exact_time(value), time_ago(value)
    )


def duration_element(start: datetime | None, end: datetime | None = None) -> Markup | str:
    """A duration in a <time> element: while it has no end the script counts it up (``data-since``)."""
    if start is None:
        return ""
    title = f"{exact_time(start)} – {exact_time(end)}" if end else f"since {exact_time(start)}"
    live = "" if end else Markup(' data-since="{}"').format(_iso(start))
    return Markup('<time datetime="PT{}S" title="{}"{}>{}</time>').format(
        max(_elapsed_seconds(start, end), 0), title, live, duration(start, end)
    )


def time_ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    seconds = int((datetime.now(UTC) - value).total_seconds())
    # A time to come (a deadline, the next autostart) reads "in 3 hours"; within a minute either way, "just now".
    future, seconds = seconds < 0, abs(seconds)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            amount = f"{count} {unit}{'s' if count != 1 else ''}"
            return f"in {amount}" if future else f"{amount} ago"
    return "just now"


def tar_of_uploads(files: dict[str, bytes]) -> bytes:
    """Pack individually uploaded template files (flat, by base name) into a tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(PurePosixPath(name.replace("\\", "/")).name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
