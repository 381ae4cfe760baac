"""The checks of a workspace's own schedule settings (autostart, autostop TTL, automatic updates), applied without
committing: on create they go in with the workspace, later the lifecycle API commits each change."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from app.core.columns import utcnow
from app.core.errors import Forbidden, InvalidInput
from app.core.schedules import ScheduleError, parse_schedule
from app.workspaces.deadlines import TTL_MAX, TTL_MIN
from app.workspaces.models import AUTOMATIC_UPDATES, Workspace
from protocol.codec import JSON

MINUTE_MS = 60_000
MILLISECOND = timedelta(milliseconds=1)


def invalid(field: str, detail: str) -> InvalidInput:
    return InvalidInput(detail, validations=[{"field": field, "detail": detail}])


def apply_autostart(
    workspace: Workspace, schedule: JSON, *, field: str = "schedule", now: datetime | None = None
) -> None:
    """Set (or, with null or "", clear) the autostart schedule and the next start it gives."""
    if schedule is not None and not isinstance(schedule, str):
        raise invalid(field, f"{field} must be a string or null.")
    if not schedule:
        workspace.autostart_schedule = workspace.next_start_at = None
        return
    if not workspace.template.allow_user_autostart:
        raise Forbidden(f"Template {workspace.template.name} does not allow autostart schedules.")
    try:
        parsed = parse_schedule(schedule)
    except ScheduleError as exc:
        raise invalid(field, str(exc)) from None
    workspace.autostart_schedule = parsed.text
    workspace.next_start_at = parsed.next_after(now or utcnow())


def apply_ttl(workspace: Workspace, ttl_ms: JSON, *, field: str = "ttl_ms") -> None:
    """None (the template's default) or 1 min … 30 days, truncated to whole minutes."""
    if ttl_ms is None:
        workspace.ttl_ms = None
        return
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool):
        raise invalid(field, f"{field} must be a whole number of milliseconds or null.")
    # Compared as numbers: a timedelta of 10**20 ms overflows before any comparison.
    if not TTL_MIN // MILLISECOND <= ttl_ms <= TTL_MAX // MILLISECOND:
        raise invalid(field, f"{field} must be between 1 minute (60000) and 30 days (2592000000).")
    if not workspace.template.allow_user_autostop:
        raise Forbidden(f"Template {workspace.template.name} sets the autostop of its workspaces.")
    workspace.ttl_ms = ttl_ms - ttl_ms % MINUTE_MS


def apply_on_create(workspace: Workspace, body: Mapping[str, JSON]) -> None:
    """The optional ``autostart_schedule``, ``ttl_ms`` and ``automatic_updates`` of a create request."""
    if body.get("autostart_schedule") is not None:
        apply_autostart(workspace, body["autostart_schedule"], field="autostart_schedule")
    if body.get("ttl_ms") is not None:
        apply_ttl(workspace, body["ttl_ms"])
    if body.get("automatic_updates") is not None:
        apply_automatic_updates(workspace, body["automatic_updates"])


def apply_automatic_updates(workspace: Workspace, value: JSON) -> None:
    if value not in AUTOMATIC_UPDATES:
        raise invalid("automatic_updates", "automatic_updates must be 'never' or 'always'.")
    workspace.automatic_updates = str(value)
