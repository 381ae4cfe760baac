"""When a started workspace stops by itself: TTL, the template's autostop requirement in the owner's quiet hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.catalog.models import Template
from app.users.models import User
from app.workspaces.deadlines import effective_ttl_ms, max_deadline_for, start_deadlines
from app.workspaces.models import Workspace

HOUR = 3_600_000
MONDAY, FRIDAY = 1 << 0, 1 << 4


def template(**fields: object) -> Template:
    values: dict[str, object] = {
        "default_ttl_ms": 0, "allow_user_autostop": True, "autostop_requirement_days": 0,
        "autostop_requirement_weeks": 1,
    }  # fmt: skip
    values.update(fields)
    return Template(**values)


def test_the_workspace_ttl_wins_unless_the_template_imposes_its_default() -> None:
    workspace = Workspace(ttl_ms=2 * HOUR)
    assert effective_ttl_ms(workspace, template(default_ttl_ms=8 * HOUR)) == 2 * HOUR
    assert effective_ttl_ms(workspace, template(default_ttl_ms=8 * HOUR, allow_user_autostop=False)) == 8 * HOUR
    assert effective_ttl_ms(Workspace(ttl_ms=None), template(default_ttl_ms=8 * HOUR)) == 8 * HOUR


def test_a_start_stops_ttl_after_it_completed_and_without_a_ttl_never() -> None:
    completed = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
    owner = User(quiet_hours_schedule=None)
    assert start_deadlines(Workspace(ttl_ms=HOUR), template(), owner, completed) == (
        completed + timedelta(hours=1),
        None,
    )
    assert start_deadlines(Workspace(ttl_ms=None), template(), owner, completed) == (None, None)


def test_the_requirement_stops_in_the_owners_quiet_hours_on_a_required_day() -> None:
    owner = User(quiet_hours_schedule="CRON_TZ=Europe/Berlin 0 22 * * *")
    # Tuesday 2026-11-24 09:00 UTC; the next Friday is 2026-11-27, 22:00 in Berlin (CET, UTC+1) is 21:00 UTC.
    started = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
    required = template(autostop_requirement_days=FRIDAY)
    assert max_deadline_for(required, owner, started) == datetime(2026, 11, 27, 21, 0, tzinfo=UTC)
    # A long TTL is cut at the forced stop; a short one is kept.
    deadline, forced = start_deadlines(Workspace(ttl_ms=200 * HOUR), required, owner, started)
    assert deadline == forced == datetime(2026, 11, 27, 21, 0, tzinfo=UTC)
    deadline, _ = start_deadlines(Workspace(ttl_ms=HOUR), required, owner, started)
    assert deadline == started + timedelta(hours=1)


def test_a_start_just_before_the_quiet_hours_runs_until_the_next_required_day() -> None:
    owner = User(quiet_hours_schedule="CRON_TZ=UTC 0 0 * * *")
    every_day = (1 << 7) - 1
    started = datetime(2026, 11, 24, 23, 30, tzinfo=UTC)
    assert max_deadline_for(template(autostop_requirement_days=every_day), owner, started) == datetime(
        2026, 11, 26, 0, 0, tzinfo=UTC
    )


def test_every_second_week_skips_the_weeks_between() -> None:
    owner = User(quiet_hours_schedule=None)  # midnight UTC
    started = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
    weekly = max_deadline_for(template(autostop_requirement_days=MONDAY), owner, started)
    fortnightly = max_deadline_for(
        template(autostop_requirement_days=MONDAY, autostop_requirement_weeks=2), owner, started
    )
    assert weekly is not None and fortnightly is not None
    assert weekly.weekday() == fortnightly.weekday() == 0
    assert fortnightly - started <= timedelta(days=14)
    # Two workspaces started a week apart stop in the same weeks.
    later = max_deadline_for(
        template(autostop_requirement_days=MONDAY, autostop_requirement_weeks=2), owner, started + timedelta(days=7)
    )
    assert later is not None and (later - fortnightly).days % 14 == 0
