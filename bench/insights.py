"""Issue 38 benchmark: usage insights on PostgreSQL, in process (only the server's work is timed: routing, SQL,
rendering).

The rows of bench/scale.py (2,000 users, 200 templates, 10,000 workspaces with ten builds each, queued over the last
ten hours; no log lines), 20,000 connections over the last two days, and a year of rollups inserted in bulk: a row
per template per day and the deployment's own, --people-per-day person rows per day (each person mostly on a
template of their own, one day in five on another) and three app rows per template per day, and their months (a row
per person and per app a month, as the rollup writes them). Then one rollup pass (today and yesterday, recomputed
from those builds and connections) is timed, and p50/p99 of the Insights page and
of each API endpoint over --requests calls, after --warmup untimed calls: over the page's default 28 days, over one
template, and over a whole year; and each of the page's queries alone. Target p99 <= 100 ms.

    .venv/bin/python bench/insights.py [--requests 100] [--warmup 5] [--people-per-day 1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask_migrate import upgrade
from sqlalchemy import insert

from app.connectionlog.models import TYPES, VIA_HTTP, VIA_TUNNEL, ConnectionLog
from app.core.config import load_settings
from app.core.extensions import db
from app.factory import create_app
from app.insights import histograms, rollup
from app.insights.models import ALL_TEMPLATES, TemplateAppDaily, TemplateUsageDaily, TemplateUserDaily
from bench._harness import percentile, postgres_and_redis
from bench.pages import signed_in
from bench.scale import NOW, Deployment, psycopg_connection

USERS, TEMPLATES, WORKSPACES, CONNECTIONS, DAYS = 2000, 200, 10_000, 20_000, 365
APPS = (("app", "code"), ("builtin", "ssh"), ("builtin", "reconnecting-pty"))
BATCH = 20_000


class InsightsDeployment(Deployment):
    """bench/scale.py's rows without their log lines (insights never read them)."""

    def _copy_logs(self, job_ids: list[str], per_job: int, *, level: str = "info", output: str = "") -> int:
        return 0


def _insert(model: type, rows: list[dict[str, object]]) -> None:
    for first in range(0, len(rows), BATCH):
        db.session.execute(insert(model), rows[first : first + BATCH])
    db.session.commit()


def seed_rollups(deployment: InsightsDeployment, people_per_day: int) -> int:
    """A year of rollups up to the day before yesterday (the pass recomputes yesterday and today)."""
    rng = random.Random(38)
    templates = [template_id for template_id, _ in deployment.templates]
    today = NOW.date()
    home = {user_id: templates[n % len(templates)] for n, user_id in enumerate(deployment.other_ids)}
    usage, people, apps = [], [], []
    for back in range(2, DAYS + 2):
        day = today - timedelta(days=back)
        day_builds = day_failed = 0
        for template_id in templates:
            builds = rng.randint(0, 60)
            failed = rng.randint(0, builds // 10)
            day_builds, day_failed = day_builds + builds, day_failed + failed
            usage.append({
                "template_id": template_id, "day": day, "active_users": rng.randint(0, 10), "builds": builds,
                "builds_succeeded": builds - failed, "builds_failed": failed,
                "build_p50_seconds": rng.uniform(20, 60) if builds else None,
                "build_p95_seconds": rng.uniform(60, 300) if builds else None,
                "ready_p50_seconds": rng.uniform(30, 90) if builds else None,
                "ready_p95_seconds": rng.uniform(90, 400) if builds else None,
                "workspaces_by_status": '{"running": 20, "stopped": 29, "failed": 1}', "computed_at": NOW,
                "build_histogram": histograms.encode(rng.uniform(20, 300) for _ in range(builds - failed)),
                "ready_histogram": histograms.encode(rng.uniform(30, 400) for _ in range(builds - failed)),
            })  # fmt: skip
            apps += [
                {"template_id": template_id, "day": day, "kind": kind, "slug": slug,
                 "sessions": rng.randint(1, 20), "seconds": rng.randint(60, 36_000)}
                for kind, slug in APPS
            ]  # fmt: skip
        usage.append({
            "template_id": ALL_TEMPLATES, "day": day, "active_users": people_per_day, "builds": day_builds,
            "builds_succeeded": day_builds - day_failed, "builds_failed": day_failed,
            "build_p50_seconds": rng.uniform(20, 60), "build_p95_seconds": rng.uniform(60, 300),
            "ready_p50_seconds": rng.uniform(30, 90),
            "ready_p95_seconds": rng.uniform(90, 400), "computed_at": NOW,
            "workspaces_by_status": f'{{"running": {20 * len(templates)}, "stopped": {29 * len(templates)}}}',
        })  # fmt: skip
        for user_id in rng.sample(deployment.other_ids, people_per_day):
            # Mostly their own template; one day in five another one.
            template_id = home[user_id] if rng.random() < 0.8 else rng.choice(templates)
            first_hour = rng.randint(0, 23)  # a working day's hours, from some hour on
            hours = (1 << min(first_hour + rng.randint(1, 9), 24)) - (1 << first_hour)
            people.append({"template_id": template_id, "day": day, "user_id": user_id,
                           "seconds": rng.randint(60, 28_800), "active_hours": hours})  # fmt: skip
    with deployment.app.app_context():
        _insert(TemplateUsageDaily, usage)
        _insert(TemplateUserDaily, people)
        _insert(TemplateAppDaily, apps)
        # The months of those days, as the rollup writes them (it rewrites only the months of the days it recomputes).
        rollup.rewrite_months(today - timedelta(days=DAYS + 1), today - timedelta(days=2))
        db.session.commit()
    return len(usage) + len(people) + len(apps)


def seed_connections(deployment: InsightsDeployment) -> None:
    """Sessions over the last two days, on the workspaces' templates, by the deployment's people."""
    rng = random.Random(7)
    templates = [template_id for template_id, _ in deployment.templates]
    rows = []
    for number in range(CONNECTIONS):
        kind = TYPES[number % len(TYPES)]
        began = NOW - timedelta(seconds=rng.randint(600, 2 * 86_400))
        rows.append({
            "id": str(uuid.uuid4()), "connect_time": began, "last_seen_at": began,
            "disconnect_time": began + timedelta(minutes=rng.randint(1, 240)), "disconnect_reason": "closed",
            "type": kind, "via": VIA_HTTP if kind == "workspace_app" else VIA_TUNNEL,
            "user_id": rng.choice(deployment.other_ids), "username": "", "organization_id": "",
            "workspace_id": str(uuid.uuid4()), "workspace_name": "ws", "workspace_owner_id": "",
            "workspace_owner_username": "", "template_id": rng.choice(templates), "agent_name": "main",
            "slug_or_port": "code" if kind == "workspace_app" else "",
        })  # fmt: skip
    with deployment.app.app_context():
        _insert(ConnectionLog, rows)


def calls(deployment: InsightsDeployment) -> dict[str, str]:
    today = NOW.date()
    template = deployment.templates[0][0]
    month = f"start_time={today - timedelta(days=27)}T00:00:00Z&end_time={today + timedelta(days=1)}T00:00:00Z"
    year = f"start_time={today - timedelta(days=364)}T00:00:00Z&end_time={today + timedelta(days=1)}T00:00:00Z"
    return {
        "page: 28 days, all templates": "/insights",
        "page: 28 days, one template": f"/insights?template={template}",
        "page: a year, all templates": f"/insights?start={today - timedelta(days=364)}&end={today}",
        "API daus": "/api/v2/insights/daus",
        "API daus, tz_offset=-5": "/api/v2/insights/daus?tz_offset=-5",
        "API daus, two templates, tz_offset=9": (
            f"/api/v2/insights/daus?tz_offset=9&template_ids={template},{deployment.templates[1][0]}"
        ),
        "API templates, 28 days by day": f"/api/v2/insights/templates?{month}&interval=day",
        "API templates, a year by week": f"/api/v2/insights/templates?{year}&interval=week",
        "API user-activity, 28 days": f"/api/v2/insights/user-activity?{month}",
        "API user-activity, a year": f"/api/v2/insights/user-activity?{year}",
    }


def time_calls(deployment: InsightsDeployment, requests: int, warmup: int) -> dict[str, tuple[float, float]]:
    page = signed_in(deployment, "owner")
    api = deployment.app.test_client()
    figures = {}
    for label, path in calls(deployment).items():
        client, headers = (api, deployment.owner_auth) if path.startswith("/api/") else (page, {})
        for _ in range(warmup):
            assert client.get(path, headers=headers).status_code == 200, label
        samples = []
        for _ in range(requests):
            began = time.perf_counter()
            reply = client.get(path, headers=headers)
            samples.append((time.perf_counter() - began) * 1000)
            assert reply.status_code == 200, (label, reply.status_code)
        figures[label] = (percentile(samples, 0.5), percentile(samples, 0.99))
    return figures


def breakdown(deployment: InsightsDeployment, requests: int) -> dict[str, tuple[float, float]]:
    """p50/p99 of each query the page makes, over its default 28 days and all templates: where its time goes."""
    from app.insights import query

    today = NOW.date()
    days = query.day_range(today - timedelta(days=27), today)
    year = query.day_range(today - timedelta(days=364), today)
    parts = {
        "active users (range)": lambda: query.active_users(None, days),
        "active users (range), a year": lambda: query.active_users(None, year),
        "app usage, a year": lambda: query.app_usage(None, year),
        "active users per day": lambda: query.daily_active_users(None, days),
        "builds per day": lambda: query.daily_builds(None, days),
        "app usage": lambda: query.app_usage(None, days),
        "workspaces by status": lambda: query.workspaces_by_status(None, days),
        "template choices": lambda: query.template_choices(None),
    }
    figures = {}
    with deployment.app.app_context():
        for label, call in parts.items():
            samples = []
            for _ in range(requests):
                began = time.perf_counter()
                call()
                samples.append((time.perf_counter() - began) * 1000)
            figures[f"  {label}"] = (percentile(samples, 0.5), percentile(samples, 0.99))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--people-per-day", type=int, default=1000, help="person rows per day of the year")
    args = parser.parse_args()
    with postgres_and_redis("insights") as (cluster, external):
        env = {"SLIPWAY_DATA_DIR": tempfile.mkdtemp(prefix="slipway-bench-"), "SLIPWAY_SECRET_KEY": "bench", **external}
        app = create_app(load_settings(env))
        with app.app_context():
            upgrade()
        deployment = InsightsDeployment(app, cluster, "insights", users=USERS, templates=TEMPLATES)
        deployment.grow_to(WORKSPACES)
        began = time.perf_counter()
        seed_connections(deployment)
        rows = seed_rollups(deployment, args.people_per_day)
        with psycopg_connection(cluster, "insights") as connection:
            connection.execute("ANALYZE")
        print(f"{rows:,} rollup rows and {CONNECTIONS:,} connections inserted in {time.perf_counter() - began:.0f} s")
        with app.app_context():
            began = time.perf_counter()
            days = rollup.roll_up_insights(app.config["SLIPWAY_SETTINGS"])
            tick = time.perf_counter() - began
        print(f"one rollup pass ({days} days, 100,000 builds and {CONNECTIONS:,} connections in them): {tick:.2f} s")
        figures = time_calls(deployment, args.requests, args.warmup) | breakdown(deployment, args.requests)
    print(f"{'call':34} | p50 ms | p99 ms")
    for label, (p50, p99) in figures.items():
        print(f"{label:34} | {p50:6.1f} | {p99:6.1f}")
    calls_only = [p99 for label, (_, p99) in figures.items() if not label.startswith(" ")]
    print(f"slowest p99: {max(calls_only):.1f} ms (target <= 100 ms); indented: the page's queries alone")


if __name__ == "__main__":
    main()
