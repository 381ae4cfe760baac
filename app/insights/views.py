"""The Insights page: a range of days and a template (or all that the viewer may read), and six charts drawn on the
server from the rollups (app/insights/charts.py)."""

from __future__ import annotations

from datetime import date

from flask import render_template, request

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.core.columns import utcnow
from app.core.errors import InvalidInput
from app.insights import charts, query

bp = page_blueprint("insights", __name__)
DEFAULT_DAYS = 28
# Beyond this many days the charts draw a point per week: a year's 365 bars are thinner than a pixel on most screens,
# and drawing (and tabulating) them was most of a year page's time.
WEEKLY_AFTER_DAYS = 90
WEEK = 7


@bp.app_context_processor
def navigation() -> dict[str, object]:
    """Whether the navigation shows Insights: asked only by pages that draw it (one small query for members)."""
    return {"may_see_insights": lambda: query.may_read_insights(page_user())}


@bp.get("/insights")
def index() -> tuple[str, int] | str:
    visible = query.visible_templates(page_user())
    template = request.args.get("template", "")
    templates = query.chosen_templates(visible, [template])
    today = utcnow().date()
    try:
        days = _days(request.args.get("start", ""), request.args.get("end", ""), today)
        error = ""
    except InvalidInput as exc:
        days, error = query.day_range(today - (DEFAULT_DAYS - 1) * query.DAY, today), exc.message
    body = render_template(
        "insights/index.html",
        days=days,
        template=template,
        choices=query.template_choices(visible),
        error=error,
        **_figures(templates, days),
    )
    return (body, 400) if error else body


def _days(start: str, end: str, today: date) -> query.DayRange:
    """The form's inclusive days (default: the last DEFAULT_DAYS up to today)."""
    try:
        last = date.fromisoformat(end) if end else today
        first = date.fromisoformat(start) if start else last - (DEFAULT_DAYS - 1) * query.DAY
    except ValueError:
        raise InvalidInput("Dates are YYYY-MM-DD.") from None
    if first > last:
        raise InvalidInput("The first day must not be after the last.")
    if last - first >= query.MAX_RANGE:
        raise InvalidInput("The range may be a year at most.")
    return query.day_range(first, last)


def _figures(templates: list[str] | None, days: query.DayRange) -> dict[str, object]:
    builds = query.daily_builds(templates, days)
    succeeded = sum(day.succeeded for day in builds)
    failed = sum(day.failed for day in builds)
    # The same queries whatever the range (a distinct count per week would read a year of person rows once more).
    daily_people = list(query.daily_active_users(templates, days).values())
    people: list[float] = list(daily_people)
    periods = [(day, day) for day in days.days]
    shown = builds
    if len(days.days) > WEEKLY_AFTER_DAYS:
        periods = query.intervals(days, WEEK)
        people = [round(sum(daily_people[n : n + WEEK]) / len(daily_people[n : n + WEEK]), 1)
                  for n in range(0, len(daily_people), WEEK)]  # fmt: skip
        shown = _weekly(builds, periods)
    return {
        "active_users": query.active_users(templates, days)[0],
        "builds_total": sum(day.builds for day in builds),
        "success_rate": succeeded / (succeeded + failed) if succeeded + failed else None,
        "charts": [
            *_timeline_charts(periods, people, shown),
            *_ranked_charts(query.app_usage(templates, days), *query.workspaces_by_status(templates, days)),
        ],
    }


def _weekly(builds: list[query.DayBuilds], weeks: list[charts.Period]) -> list[query.DayBuilds]:
    """The days' builds summed per week; a week's p50 and p95 are its days' weighted by their succeeded builds (the
    rollups keep a day's percentiles, not every build's time: the chart says so)."""
    by_day = {day.day: day for day in builds}
    summed = []
    for first, last in weeks:
        week = [by_day[first + n * query.DAY] for n in range((last - first).days + 1)]
        summed.append(
            query.DayBuilds(
                first,
                sum(day.builds for day in week),
                sum(day.succeeded for day in week),
                sum(day.failed for day in week),
                *(_weighted([(getattr(day, name), day.succeeded) for day in week]) for name in PERCENTILES),
            )
        )
    return summed


PERCENTILES = ("build_p50", "build_p95", "ready_p50", "ready_p95")


def _weighted(values: list[tuple[float | None, int]]) -> float | None:
    weight = sum(count for value, count in values if value is not None)
    if not weight:
        return None
    return sum(value * count for value, count in values if value is not None) / weight


def _timeline_charts(
    periods: list[charts.Period], people: list[float], builds: list[query.DayBuilds]
) -> list[charts.Chart]:
    weekly = any(first != last for first, last in periods)
    per, name = ("week", "Week") if weekly else ("day", "Day")
    weighted = (
        "A week's figures are its days' weighted by their succeeded builds."
        if weekly
        else "Over some of the templates, a day's figures are theirs weighted by their builds (all: exact)."
    )
    grouped = f" Over {WEEKLY_AFTER_DAYS} days, a point per week (from the range's first day)." if weekly else ""
    outcomes = [
        charts.Series("Succeeded", "chart-ok", [day.succeeded for day in builds]),
        charts.Series("Failed", "chart-failed", [day.failed for day in builds]),
        charts.Series("Other", "chart-other", [day.builds - day.succeeded - day.failed for day in builds]),
    ]
    build_times = [
        charts.Series("p50", "chart-p50", [day.build_p50 for day in builds]),
        charts.Series("p95", "chart-p95", [day.build_p95 for day in builds]),
    ]
    ready_times = [
        charts.Series("p50", "chart-p50", [day.ready_p50 for day in builds]),
        charts.Series("p95", "chart-p95", [day.ready_p95 for day in builds]),
    ]
    return [
        charts.per_day(
            "users",
            "Active users per day, a week's average" if weekly else "Active users per day",
            "Distinct people who connected (SSH, terminal, ports, apps) on each day"
            f"{', averaged over each week' if weekly else ''}.{grouped}",
            periods,
            [charts.Series("People", "chart-bar", people)],
            period_name=name,
        ),
        charts.per_day(
            "builds",
            f"Builds per {per}",
            f"Builds queued each {per}: succeeded, failed, and the others (canceled or unfinished).{grouped}",
            periods,
            outcomes,
            period_name=name,
        ),
        charts.per_day(
            "build-time",
            "Build time",
            f"p50 and p95 of the succeeded builds' run time per {per}, in seconds. {weighted}{grouped}",
            periods,
            build_times,
            lines=True,
            unit="s",
            fmt="{:.1f}",
            period_name=name,
        ),
        charts.per_day(
            "ready-time",
            "Time to ready",
            f"p50 and p95 from a start build's queueing to all its agents being ready, in seconds, per {per}. "
            f"{weighted}{grouped}",
            periods,
            ready_times,
            lines=True,
            unit="s",
            fmt="{:.1f}",
            period_name=name,
        ),
    ]


def _ranked_charts(
    apps: list[query.AppUsage], snapshot_day: date | None, statuses: dict[str, int]
) -> list[charts.Chart]:
    on = snapshot_day.isoformat() if snapshot_day else "the range's last day with a snapshot (none yet)"
    return [
        charts.ranked(
            "apps",
            "App usage",
            "Minutes spent in each app and way in over the range.",
            [(app.display_name, app.seconds / 60) for app in apps],
            unit="minutes",
            fmt="{:.1f}",
        ),
        charts.ranked(
            "statuses",
            "Workspaces by status",
            f"Workspaces by status on {on}.",
            list(statuses.items()),
            unit="workspaces",
            fmt="{:g}",
        ),
    ]
