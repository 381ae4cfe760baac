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
    return {
        "active_users": query.active_users(templates, days)[0],
        "builds_total": sum(day.builds for day in builds),
        "success_rate": succeeded / (succeeded + failed) if succeeded + failed else None,
        "charts": [
            *_daily_charts(days.days, query.daily_active_users(templates, days), builds),
            *_ranked_charts(query.app_usage(templates, days), *query.workspaces_by_status(templates, days)),
        ],
    }


def _daily_charts(days: list[date], people: dict[date, int], builds: list[query.DayBuilds]) -> list[charts.Chart]:
    weighted = "Over some of the templates, a day's figures are theirs weighted by their builds (all: exact)."
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
            "Active users per day",
            "Distinct people who connected (SSH, terminal, ports, apps) on each day.",
            days,
            [charts.Series("People", "chart-bar", list(people.values()))],
        ),
        charts.per_day(
            "builds",
            "Builds per day",
            "Builds queued each day: succeeded, failed, and the others (canceled or unfinished).",
            days,
            outcomes,
        ),
        charts.per_day(
            "build-time",
            "Build time",
            f"p50 and p95 of the succeeded builds' run time per day, in seconds. {weighted}",
            days,
            build_times,
            lines=True,
            unit="s",
            fmt="{:.1f}",
        ),
        charts.per_day(
            "ready-time",
            "Time to ready",
            f"p50 and p95 from a start build's queueing to all its agents being ready, in seconds. {weighted}",
            days,
            ready_times,
            lines=True,
            unit="s",
            fmt="{:.1f}",
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
