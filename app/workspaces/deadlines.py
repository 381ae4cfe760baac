"""When a started workspace stops by itself (reference §2.4): its ``deadline`` (completion + TTL, moved later by
activity and by its owner) and its ``max_deadline`` (the template's autostop requirement: the start of the owner's
quiet hours on a required day, however active the workspace is)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.catalog.models import Template
from app.core.schedules import Schedule, ScheduleError, parse_schedule
from app.users.models import User
from app.workspaces.models import Workspace

DEFAULT_QUIET_HOURS = "CRON_TZ=UTC 0 0 * * *"
# A requirement never stops a workspace within this long of its start: someone who starts just before their quiet
# hours gets the next required day instead of a stop minutes later.
REQUIREMENT_MIN_RUN = timedelta(hours=1)
TTL_MIN = timedelta(minutes=1)
TTL_MAX = timedelta(days=30)
# Weeks for ``autostop_requirement_weeks`` count from this Monday, so "every 2 weeks" picks the same weeks for all.
_WEEKS_EPOCH = datetime(2023, 1, 2, tzinfo=UTC)


def effective_ttl_ms(workspace: Workspace, template: Template) -> int:
    """The autostop TTL of the workspace's next start; 0 = no autostop. A template that does not let people set
    their own autostop imposes its default."""
    if workspace.ttl_ms is not None and template.allow_user_autostop:
        return workspace.ttl_ms
    return template.default_ttl_ms


def quiet_hours(owner: User) -> Schedule:
    try:
        return parse_schedule(owner.quiet_hours_schedule or DEFAULT_QUIET_HOURS, daily_only=True)
    except ScheduleError:  # stored values were checked when set; a tz database that lost a zone falls back
        return parse_schedule(DEFAULT_QUIET_HOURS, daily_only=True)


def max_deadline_for(template: Template, owner: User, started: datetime) -> datetime | None:
    """The forced stop of a start at ``started``: the owner's next quiet hours on a day the template requires
    (and, every ``weeks`` weeks, in a required week); None when the template has no requirement."""
    days = template.autostop_requirement_days
    if not days:
        return None
    weeks = max(1, template.autostop_requirement_weeks)
    schedule = quiet_hours(owner)
    candidate = schedule.next_after(started + REQUIREMENT_MIN_RUN)
    for _ in range(7 * weeks + 7):
        local = candidate.astimezone(schedule.zone)
        week = (local.date() - _WEEKS_EPOCH.date()).days // 7
        if days & (1 << local.weekday()) and week % weeks == 0:
            return candidate
        candidate = schedule.next_after(candidate)
    return None


def deleting_at_for(template: Template, dormant_at: datetime) -> datetime | None:
    """When a workspace that went dormant at ``dormant_at`` is deleted: per its template, or never."""
    autodelete = template.time_til_dormant_autodelete_ms
    return dormant_at + timedelta(milliseconds=autodelete) if autodelete > 0 else None


def start_deadlines(
    workspace: Workspace, template: Template, owner: User, completed: datetime
) -> tuple[datetime | None, datetime | None]:
    """``(deadline, max_deadline)`` of a start that succeeded at ``completed``."""
    ttl_ms = effective_ttl_ms(workspace, template)
    deadline = completed + timedelta(milliseconds=ttl_ms) if ttl_ms else None
    max_deadline = max_deadline_for(template, owner, completed)
    if max_deadline is not None and (deadline is None or deadline > max_deadline):
        deadline = max_deadline
    return deadline, max_deadline
