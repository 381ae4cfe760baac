"""The monthly people and app rollups: a range's whole months are read from them and its ends from the daily rows,
and the answers are those of the daily rows alone (people still counted once over the range); the rollup rewrites
the months of the days it recomputes."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

import pytest
from flask import Flask
from sqlalchemy import insert, select

from app.core.extensions import db
from app.insights import query, rollup
from app.insights.models import TemplateAppDaily, TemplateAppMonthly, TemplateUserDaily, TemplateUserMonthly

pytestmark = pytest.mark.databases("sqlite", "postgresql")

TEMPLATES = ["00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b",
             "00000000-0000-4000-8000-00000000000c"]  # fmt: skip
PEOPLE = [f"00000000-0000-4000-8000-0000000001{n:02d}" for n in range(12)]
FIRST, LAST = date(2025, 11, 20), date(2026, 3, 10)
APPS = [("app", "code"), ("builtin", "ssh")]
RANGES = {
    "mid-month to mid-month across the year end": (date(2025, 12, 10), date(2026, 2, 20)),
    "exactly two whole months across the year end": (date(2025, 12, 1), date(2026, 1, 31)),
    "one whole month": (date(2026, 2, 1), date(2026, 2, 28)),
    "from a first of the month to mid-month": (date(2025, 12, 1), date(2026, 1, 10)),
    "from mid-month to a month's end": (date(2025, 11, 25), date(2026, 1, 31)),
    "one day": (date(2026, 1, 15), date(2026, 1, 15)),
    "one day, a first of the month": (date(2026, 2, 1), date(2026, 2, 1)),
    "within one month": (date(2026, 1, 3), date(2026, 1, 29)),
    "the whole fixture": (FIRST, LAST),
}
CHOICES = {"all templates": None, "one template": TEMPLATES[:1], "two templates": TEMPLATES[:2]}


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


@pytest.fixture
def daily(app: Flask) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Random daily rows (a person on a few templates a day, often none) and their months, written by the rollup."""
    rng = random.Random(54)
    people, apps = [], []
    for day in _days(FIRST, LAST):
        for user_id in rng.sample(PEOPLE, rng.randint(0, 5)):
            for template_id in rng.sample(TEMPLATES, rng.randint(1, 2)):
                people.append({"template_id": template_id, "day": day, "user_id": user_id,
                               "seconds": rng.randint(1, 9000), "active_hours": 1})  # fmt: skip
        for template_id in TEMPLATES:
            for kind, slug in rng.sample(APPS, rng.randint(0, 2)):
                apps.append({"template_id": template_id, "day": day, "kind": kind, "slug": slug,
                             "sessions": rng.randint(0, 4), "seconds": rng.randint(0, 5000)})  # fmt: skip
    with app.app_context():
        db.session.execute(insert(TemplateUserDaily), people)
        db.session.execute(insert(TemplateAppDaily), apps)
        rollup.rewrite_months(FIRST, LAST)
        db.session.commit()
    return people, apps


def _chosen(row: dict[str, object], first: date, last: date, templates: list[str] | None) -> bool:
    return first <= row["day"] <= last and (templates is None or row["template_id"] in templates)  # type: ignore[operator]


@pytest.mark.parametrize("templates", CHOICES.values(), ids=CHOICES.keys())
def test_months_and_ends_answer_as_the_daily_rows_do(
    app: Flask, daily: tuple[list[dict[str, object]], list[dict[str, object]]], templates: list[str] | None
) -> None:
    people, apps = daily
    with app.app_context():
        for label, (first, last) in RANGES.items():
            days = query.day_range(first, last)
            rows = [row for row in people if _chosen(row, first, last, templates)]
            assert query.active_users(templates, days) == [len({row["user_id"] for row in rows})], label
            seconds: dict[object, int] = defaultdict(int)
            used: dict[object, set[object]] = defaultdict(set)
            for row in rows:
                seconds[row["user_id"]] += row["seconds"]  # type: ignore[operator]
                used[row["user_id"]].add(row["template_id"])
            activity = {(a.user_id, tuple(a.template_ids), a.seconds) for a in query.user_activity(templates, days)}
            assert activity == {(user, tuple(sorted(used[user])), total) for user, total in seconds.items()}, label  # type: ignore[arg-type]
            totals: dict[tuple[object, object], list[int]] = defaultdict(lambda: [0, 0])
            app_templates: dict[tuple[object, object], set[object]] = defaultdict(set)
            for row in (row for row in apps if _chosen(row, first, last, templates)):
                key = (row["kind"], row["slug"])
                totals[key][0] += row["sessions"]  # type: ignore[assignment, operator]
                totals[key][1] += row["seconds"]  # type: ignore[assignment, operator]
                app_templates[key].add(row["template_id"])
            usage = {
                (a.kind, a.slug, tuple(a.template_ids), a.sessions, a.seconds) for a in query.app_usage(templates, days)
            }
            expected = {(*key, tuple(sorted(app_templates[key])), n, s) for key, (n, s) in totals.items()}  # type: ignore[arg-type]
            assert usage == expected, label


def test_the_split_reads_whole_months_only_where_there_are_some() -> None:
    assert query.split_by_month(query.day_range(date(2025, 12, 10), date(2026, 2, 20))) == (
        [(date(2025, 12, 10), date(2025, 12, 31)), (date(2026, 2, 1), date(2026, 2, 20))],
        (date(2026, 1, 1), date(2026, 2, 1)),
    )
    assert query.split_by_month(query.day_range(date(2025, 12, 1), date(2026, 1, 31))) == (
        [],
        (date(2025, 12, 1), date(2026, 2, 1)),
    )
    assert query.split_by_month(query.day_range(date(2026, 1, 3), date(2026, 1, 29))) == (
        [(date(2026, 1, 3), date(2026, 1, 29))],
        None,
    )


def test_a_rollup_pass_rewrites_the_months_of_the_days_it_recomputes(app: Flask) -> None:
    """Rows of a recomputed day that no connection backs go, and their month loses them in the same transaction;
    another month's rows stay as they were."""
    kept, recomputed, other = date(2026, 1, 5), date(2026, 1, 20), date(2025, 12, 20)
    person = PEOPLE[0]
    with app.app_context():
        for day, seconds in ((kept, 100), (recomputed, 50), (other, 7)):
            db.session.add(TemplateUserDaily(template_id=TEMPLATES[0], day=day, user_id=person, seconds=seconds))
            db.session.add(TemplateAppDaily(template_id=TEMPLATES[0], day=day, kind="app", slug="code", sessions=1,
                                            seconds=seconds))  # fmt: skip
        db.session.flush()
        rollup.rewrite_months(other, recomputed)
        db.session.commit()
        rollup.roll_up_days(recomputed, recomputed, datetime(2026, 1, 21, tzinfo=UTC))
        months = db.session.execute(
            select(TemplateUserMonthly.month, TemplateUserMonthly.seconds, TemplateUserMonthly.days)
        ).all()
        app_months = db.session.execute(select(TemplateAppMonthly.month, TemplateAppMonthly.seconds)).all()
    assert sorted(tuple(row) for row in months) == [(date(2025, 12, 1), 7, 1), (date(2026, 1, 1), 100, 1)]
    assert sorted(tuple(row) for row in app_months) == [(date(2025, 12, 1), 7), (date(2026, 1, 1), 100)]
