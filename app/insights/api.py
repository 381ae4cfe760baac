"""``GET /api/v2/insights/daus``, ``/insights/templates`` and ``/insights/user-activity``: Coder's shapes, read from
the rollups. Owners, auditors and template admins read every template; a template's own admins read theirs."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from flask import Response, jsonify, request

from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.core.columns import rfc3339, utcnow
from app.insights import query
from protocol.codec import JsonObject

bp = api_blueprint("insights_api", __name__)


def _templates() -> list[str] | None:
    return query.chosen_templates(query.visible_templates(api_user()), request.args.getlist("template_ids"))


@bp.get("/insights/daus")
def daus() -> Response:
    """Distinct people per day over the last DAU_DAYS days, the days of the zone ``tz_offset`` hours east of UTC
    (Coder's parameter; 0, UTC, by default)."""
    templates = _templates()
    offset = query.parse_tz_offset(request.args.get("tz_offset"))
    today = (utcnow() + timedelta(hours=offset)).date()
    days = query.day_range(today - (query.DAU_DAYS - 1) * query.DAY, today)
    counts = query.daily_active_users(templates, days, offset)
    entries = [{"date": day.isoformat(), "amount": amount} for day, amount in counts.items()]
    return jsonify({"entries": entries, "tz_hour_offset": offset})


@bp.get("/insights/templates")
def templates_report() -> Response:
    templates = _templates()
    days = query.parse_range(request.args.get("start_time"), request.args.get("end_time"))
    interval = query.parse_interval(request.args.get("interval"))
    ids = templates or []
    apps = query.app_usage(templates, days)
    buckets = query.intervals(days, query.INTERVAL_DAYS[interval])
    counts = query.active_users(templates, days, interval)
    report: JsonObject = {
        "start_time": rfc3339(days.start),
        "end_time": rfc3339(days.end),
        "template_ids": list(ids),
        "active_users": query.active_users(templates, days)[0],
        "apps_usage": [
            {
                "template_ids": list(app.template_ids),
                "type": app.kind,
                "display_name": app.display_name,
                "slug": app.slug,
                "icon": "",
                "seconds": app.seconds,
                "times_used": app.sessions,
            }
            for app in apps
        ],
        "parameters_usage": [],
    }
    interval_reports: list[JsonObject] = [
        {
            "start_time": rfc3339(_midnight(first)),
            "end_time": rfc3339(_midnight(last + query.DAY)),
            "template_ids": list(ids),
            "interval": interval,
            "active_users": count,
        }
        for (first, last), count in zip(buckets, counts, strict=True)
    ]
    return jsonify({"report": report, "interval_reports": interval_reports})


@bp.get("/insights/user-activity")
def user_activity() -> Response:
    templates = _templates()
    days = query.parse_range(request.args.get("start_time"), request.args.get("end_time"))
    users: list[JsonObject] = [
        {
            "template_ids": list(user.template_ids),
            "user_id": user.user_id,
            "username": user.username,
            "avatar_url": "",
            "seconds": user.seconds,
        }
        for user in query.user_activity(templates, days)
    ]
    report: JsonObject = {
        "start_time": rfc3339(days.start),
        "end_time": rfc3339(days.end),
        "template_ids": list(templates or []),
        "users": list(users),
    }
    return jsonify({"report": report})


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)
