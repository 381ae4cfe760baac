"""Who may set what about a workspace's life, and the checks: schedules, TTLs, dormancy, automatic updates, a
template's schedule and policy, a person's quiet hours. Every bad value is a 400 naming its field."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import joinedload

from app.catalog.models import Template
from app.core.columns import rfc3339, utcnow
from app.core.errors import Forbidden
from app.core.extensions import db
from app.core.schedules import ScheduleError, mask_from_weekdays, parse_schedule
from app.core.validation import FieldErrors
from app.users.models import User
from app.workspaces import schedule_rules
from app.workspaces.deadlines import DEFAULT_QUIET_HOURS, TTL_MAX, deleting_at_for
from app.workspaces.models import Workspace
from app.workspaces.schedule_rules import MINUTE_MS, invalid
from app.workspaces.services import build_status, latest_build
from protocol.codec import JSON
from protocol.resources import SHARE_LEVELS

# The longest any template duration may be: ten years is "never" in practice, and keeps datetimes in range.
DURATION_MAX_MS = 10 * 365 * 24 * 3_600_000
EXTEND_MIN_AHEAD = timedelta(minutes=30)


def set_autostart(workspace: Workspace, schedule: JSON, now: datetime | None = None) -> None:
    schedule_rules.apply_autostart(workspace, schedule, now=now)
    db.session.commit()


def set_ttl(workspace: Workspace, ttl_ms: JSON) -> None:
    """A running workspace keeps its current deadline (Coder's rule): the new TTL counts from the next start."""
    schedule_rules.apply_ttl(workspace, ttl_ms)
    db.session.commit()


def set_automatic_updates(workspace: Workspace, value: JSON) -> None:
    schedule_rules.apply_automatic_updates(workspace, value)
    db.session.commit()


def set_dormant(workspace: Workspace, dormant: JSON, now: datetime | None = None) -> None:
    if not isinstance(dormant, bool):
        raise invalid("dormant", "dormant must be true or false.")
    now = now or utcnow()
    if dormant:
        if workspace.dormant_at is None:
            workspace.dormant_at = now
            workspace.deleting_at = deleting_at_for(workspace.template, now)
    else:
        # Used now: otherwise the next tick would find it idle and make it dormant again.
        workspace.dormant_at = workspace.deleting_at = None
        workspace.last_used_at = now
    db.session.commit()


def extend_deadline(workspace: Workspace, deadline_text: JSON, now: datetime | None = None) -> datetime:
    """Move a running workspace's autostop to ``deadline`` (at least 30 min ahead, never past max_deadline nor
    further than the longest TTL a person may set). A template that sets the autostop of its workspaces
    (``allow_user_autostop`` off) lets nobody move it: extending is setting one's own autostop, like a TTL."""
    now = now or utcnow()
    if not workspace.template.allow_user_autostop:
        raise Forbidden(f"Template {workspace.template.name} sets the autostop of its workspaces: it cannot be moved.")
    if not isinstance(deadline_text, str):
        raise invalid("deadline", "deadline must be an RFC 3339 time, e.g. 2026-11-24T18:00:00Z.")
    try:
        deadline = datetime.fromisoformat(deadline_text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid("deadline", "deadline must be an RFC 3339 time, e.g. 2026-11-24T18:00:00Z.") from None
    if deadline.tzinfo is None:
        raise invalid("deadline", "deadline needs a time zone (Z or +hh:mm).")
    try:  # 9999-12-31T23:59:59-01:00 is a valid time that no UTC datetime holds
        deadline = deadline.astimezone(UTC)
    except OverflowError:
        raise invalid("deadline", "deadline is out of range.") from None
    if deadline > now + timedelta(milliseconds=DURATION_MAX_MS):  # later arithmetic (a bump) must stay in range
        raise invalid("deadline", "The new deadline must be within ten years from now.")
    build = latest_build(workspace)
    if build_status(build) != "running":
        raise invalid("deadline", "Only a running workspace has an autostop to extend.")
    if deadline < now + EXTEND_MIN_AHEAD:
        raise invalid("deadline", "The new deadline must be at least 30 minutes from now.")
    if deadline > now + TTL_MAX:
        raise invalid("deadline", f"The new deadline may be at most {TTL_MAX.days} days from now.")
    if build.max_deadline is not None and deadline > build.max_deadline:
        raise invalid(
            "deadline", f"The template stops this workspace at {build.max_deadline:%Y-%m-%d %H:%M} UTC at the latest."
        )
    build.deadline = deadline
    db.session.commit()
    return deadline


def set_quiet_hours(user: User, schedule: JSON) -> None:
    if not isinstance(schedule, str) or not schedule.strip():
        raise invalid("schedule", "schedule must be a daily 'CRON_TZ=<zone> <minute> <hour> * * *'.")
    try:
        parsed = parse_schedule(schedule, daily_only=True)
    except ScheduleError as exc:
        raise invalid("schedule", str(exc)) from None
    user.quiet_hours_schedule = None if parsed.text == DEFAULT_QUIET_HOURS else parsed.text
    db.session.commit()


def quiet_hours_of(user: User) -> str:
    return user.quiet_hours_schedule or DEFAULT_QUIET_HOURS


# Durations in milliseconds: 0 turns the feature off, else at least a minute.
_DURATIONS = (
    "default_ttl_ms", "activity_bump_ms", "failure_ttl_ms", "time_til_dormant_ms", "time_til_dormant_autodelete_ms",
)  # fmt: skip
_FLAGS = ("allow_user_autostart", "allow_user_autostop", "require_active_version", "protect_persistent_resources")
# Whole numbers, 0 for "no limit": workspaces per person, the daily cost its prebuilds may use together.
_COUNTS = ("max_workspaces_per_person", "prebuild_budget")
_TEXTS = {"display_name": 64, "description": 4096, "icon": 256, "deprecation_message": 4096}


def update_template(template: Template, body: Mapping[str, JSON]) -> Template:
    """``PATCH /api/v2/templates/{id}``: only the fields given change; all are checked before any is."""
    errors = FieldErrors()
    changes: dict[str, object] = {}
    known = {*_DURATIONS, *_FLAGS, *_TEXTS, *_COUNTS, "autostop_requirement", "max_port_share_level"}
    for unknown in sorted(set(body) - known):
        errors.add(unknown, "Not a template setting.")
    _texts(body, errors, changes)
    _durations(body, errors, changes)
    for name in _FLAGS:
        if name in body:
            if not isinstance(body[name], bool):
                errors.add(name, "Must be true or false.")
            else:
                changes[name] = body[name]
    _counts(body, errors, changes)
    if "autostop_requirement" in body:
        _requirement(body["autostop_requirement"], errors, changes)
    if "max_port_share_level" in body and body["max_port_share_level"] not in SHARE_LEVELS:
        errors.add("max_port_share_level", "Must be owner, authenticated or public.")
    elif "max_port_share_level" in body:
        changes["max_port_share_level"] = body["max_port_share_level"]
    errors.raise_if_any("Some template settings are invalid.")
    autodelete_changed = (
        "time_til_dormant_autodelete_ms" in changes
        and changes["time_til_dormant_autodelete_ms"] != template.time_til_dormant_autodelete_ms
    )
    for name, value in changes.items():
        setattr(template, name, value)
    if autodelete_changed:
        _reschedule_deletions(template)
    db.session.commit()
    return template


def _texts(body: Mapping[str, JSON], errors: FieldErrors, changes: dict[str, object]) -> None:
    for name, limit in _TEXTS.items():
        if name not in body:
            continue
        value = body[name]
        if not isinstance(value, str) or len(value) > limit:
            errors.add(name, f"Must be text of at most {limit} characters.")
        elif name == "icon" and value and not value.startswith(("/", "https://", "http://")):
            errors.add(name, "Use an https:// URL or a path on this server (/icon/...).")
        else:
            changes[name] = value.strip()


def _counts(body: Mapping[str, JSON], errors: FieldErrors, changes: dict[str, object]) -> None:
    for name in _COUNTS:
        if name not in body:
            continue
        value = body[name]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 2**31 - 1:
            errors.add(name, "Must be a whole number, 0 for no limit.")
        else:
            changes[name] = value


def _durations(body: Mapping[str, JSON], errors: FieldErrors, changes: dict[str, object]) -> None:
    for name in _DURATIONS:
        if name not in body:
            continue
        value = body[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            errors.add(name, "Must be a whole number of milliseconds (0 turns it off).")
        elif value and not MINUTE_MS <= value <= DURATION_MAX_MS:
            errors.add(name, "Must be 0 (off) or between 1 minute (60000) and 10 years.")
        else:
            changes[name] = value


def _requirement(raw: JSON, errors: FieldErrors, changes: dict[str, object]) -> None:
    if not isinstance(raw, dict):
        errors.add("autostop_requirement", "Must be {days_of_week: [monday, ...], weeks: n}.")
        return
    days = raw.get("days_of_week", [])
    weeks = raw.get("weeks", 1)
    if not isinstance(days, list) or not all(isinstance(day, str) for day in days):
        errors.add("autostop_requirement.days_of_week", "Must be a list of day names (monday ... sunday).")
    else:
        try:
            changes["autostop_requirement_days"] = mask_from_weekdays([str(day) for day in days])
        except ScheduleError as exc:
            errors.add("autostop_requirement.days_of_week", str(exc))
    if not isinstance(weeks, int) or isinstance(weeks, bool) or not 1 <= weeks <= 16:
        errors.add("autostop_requirement.weeks", "Must be a whole number of weeks from 1 to 16.")
    else:
        changes["autostop_requirement_weeks"] = weeks


def _reschedule_deletions(template: Template) -> None:
    """Dormant workspaces of the template are deleted per its new setting, counted from when they went dormant."""
    dormant = db.session.scalars(
        select(Workspace).where(
            Workspace.template_id == template.id, Workspace.dormant_at.is_not(None), Workspace.deleted.is_(False)
        )
    ).all()
    for workspace in dormant:
        assert workspace.dormant_at is not None  # noqa: S101 - selected for it
        workspace.deleting_at = deleting_at_for(template, workspace.dormant_at)


UPCOMING_LIMIT = 50


def upcoming(now: datetime | None = None) -> dict[str, list[dict[str, JSON]]]:
    """For admins: the workspaces that go dormant next (by their last use and their template's threshold) and the
    dormant ones deleted next, soonest first; a query per template with dormancy, however many workspaces."""
    now = now or utcnow()
    dormant_next: list[tuple[datetime, Workspace]] = []
    templates = db.session.scalars(select(Template).where(Template.time_til_dormant_ms > 0)).all()
    for template in templates:
        idle_for = timedelta(milliseconds=template.time_til_dormant_ms)
        rows = db.session.scalars(
            select(Workspace)
            .where(Workspace.template_id == template.id, Workspace.deleted.is_(False), Workspace.dormant_at.is_(None))
            .order_by(Workspace.last_used_at)
            .limit(UPCOMING_LIMIT)
            .options(joinedload(Workspace.owner), joinedload(Workspace.template))
        ).unique()
        dormant_next.extend((workspace.last_used_at + idle_for, workspace) for workspace in rows)
    dormant_next.sort(key=lambda pair: pair[0])
    deleted_next = db.session.scalars(
        select(Workspace)
        .where(Workspace.deleted.is_(False), Workspace.deleting_at.is_not(None))
        .order_by(Workspace.deleting_at)
        .limit(UPCOMING_LIMIT)
        .options(joinedload(Workspace.owner), joinedload(Workspace.template))
    ).unique()
    return {
        "dormant_next": [
            _upcoming_row(workspace, "dormant_at", when) for when, workspace in dormant_next[:UPCOMING_LIMIT]
        ],
        "deleted_next": [_upcoming_row(workspace, "deleting_at", workspace.deleting_at) for workspace in deleted_next],
    }


def _upcoming_row(workspace: Workspace, label: str, when: datetime | None) -> dict[str, JSON]:
    return {
        "id": workspace.id, "name": workspace.name, "owner_name": workspace.owner.username,
        "template_name": workspace.template.name, label: rfc3339(when), "last_used_at": rfc3339(workspace.last_used_at),
    }  # fmt: skip
