"""Usage insights in-process: the rollup of a hand-counted fixture (two templates, three workspaces, seven builds,
five connections on two known days) answers with the numbers counted by hand below; running it again changes
nothing; the backfill walks back in bounded steps; who may read which template; bad query input is a 400."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from app.catalog.models import Template, TemplateVersion
from app.connectionlog.models import ConnectionLog
from app.core.columns import new_id, utcnow
from app.core.extensions import db
from app.insights import histograms, query, rollup
from app.insights.models import ALL_TEMPLATES, TemplateAppDaily, TemplateUsageDaily, TemplateUserDaily
from app.provisioning.models import ProvisionerJob
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.workspaces.models import Workspace, WorkspaceBuild
from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.permissions import more_personas, restricted_template
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

TODAY = utcnow().date()
D0, D1 = TODAY - timedelta(days=2), TODAY - timedelta(days=1)


def at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=UTC)


@dataclass
class Fixture:
    people: dict[str, Persona]
    alpha: str  # template A: erin administers it
    beta: str  # template B


class Builder:
    """Rows as the server stores them, with the times the test needs (made through the ORM: no daemon runs)."""

    def __init__(self, template_id: str) -> None:
        self.template = db.session.get_one(Template, template_id)
        version = db.session.get_one(TemplateVersion, self.template.active_version_id)
        self.version_id, self.file_id = version.id, version.job.file_id

    def workspace(self, name: str, owner: Persona) -> Workspace:
        workspace = Workspace(id=new_id(), name=name, owner_id=owner.id, template_id=self.template.id)
        db.session.add(workspace)
        db.session.flush()
        return workspace

    def build(
        self, workspace: Workspace, number: int, transition: str, created: datetime, run: float, outcome: str,
        ready_after: tuple[float | None, ...] = (),
    ) -> None:  # fmt: skip
        started = created + timedelta(seconds=10)
        job = ProvisionerJob(
            id=new_id(), type="workspace_build", queue="q", file_id=self.file_id, initiator_id=workspace.owner_id,
            created_at=created, started_at=started, completed_at=started + timedelta(seconds=run),
            error="boom" if outcome == "failed" else None,
            canceled_at=started if outcome == "canceled" else None,
        )  # fmt: skip
        build = WorkspaceBuild(
            id=new_id(), workspace_id=workspace.id, build_number=number, transition=transition,
            template_version_id=self.version_id, job_id=job.id, initiator_id=workspace.owner_id, created_at=created,
        )  # fmt: skip
        db.session.add_all([job, build])
        workspace.latest_build_id = build.id
        if ready_after:
            resource = WorkspaceResource(id=new_id(), job_id=job.id, transition=transition, name="box", type="t",
                                         kind="managed")  # fmt: skip
            db.session.add(resource)
            for n, after in enumerate(ready_after):
                ready = None if after is None else created + timedelta(seconds=after)
                db.session.add(WorkspaceAgent(resource_id=resource.id, name=f"a{n}", os="linux", arch="amd64",
                                              created_at=created, ready_at=ready))  # fmt: skip
        db.session.flush()

    def connection(
        self, workspace: Workspace, who: Persona | None, kind: str, slug: str, began: datetime, ended: datetime
    ) -> None:
        db.session.add(ConnectionLog(
            type=kind, via="http" if kind == "workspace_app" else "tunnel", user_id=who.id if who else None,
            username=who.username if who else "", organization_id=self.template.organization_id,
            workspace_id=workspace.id, workspace_name=workspace.name, workspace_owner_id=workspace.owner_id,
            workspace_owner_username="", template_id=self.template.id, agent_name="main", slug_or_port=slug,
            connect_time=began, disconnect_time=ended, last_seen_at=ended, disconnect_reason="closed",
        ))  # fmt: skip


@pytest.fixture
def fixture(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> Fixture:
    """The hand-counted world (D0 is the day before yesterday, D1 yesterday; times UTC):

    template A: wA1 (carol), wA2 (dave); template B: wB1 (carol).
    D0: wA1#1 start 60 s ok, ready +100 s · wA2#1 start 120 s ok, ready +200 s · wA2#2 stop failed ·
        wB1#1 start 90 s ok, one of its two agents never ready.
    D1: wA1#2 stop 45 s ok · wA1#3 start canceled · wA2#3 start 300 s ok, ready +400 s.
    Connections: carol SSH wA1 D0 09:30-10:00 · carol app code wA1 D0 23:00-D1 01:00 · dave terminal wA2
    D1 12:00-12:10 · alice port 8080 wB1 D0 14:00-14:05 · a signed-out visitor app code wA1 D1 15:00-15:01."""
    people = more_personas(app, personas)
    alpha = restricted_template(client, people, name="alpha")["id"]
    beta = import_template(client, people, FakeDaemon(client, name="d2"), name="beta")["id"]
    with app.app_context():
        a, b = Builder(alpha), Builder(beta)
        wa1, wa2 = a.workspace("wa1", people["carol"]), a.workspace("wa2", people["dave"])
        wb1 = b.workspace("wb1", people["carol"])
        a.build(wa1, 1, "start", at(D0, 9), 60, "ok", (100,))
        a.build(wa2, 1, "start", at(D0, 10), 120, "ok", (200,))
        a.build(wa2, 2, "stop", at(D0, 11), 30, "failed")
        b.build(wb1, 1, "start", at(D0, 12), 90, "ok", (150, None))
        a.build(wa1, 2, "stop", at(D1, 8), 45, "ok")
        a.build(wa1, 3, "start", at(D1, 9), 5, "canceled")
        a.build(wa2, 3, "start", at(D1, 10), 300, "ok", (400,))
        a.connection(wa1, people["carol"], "ssh", "", at(D0, 9, 30), at(D0, 10))
        a.connection(wa1, people["carol"], "workspace_app", "code", at(D0, 23), at(D1, 1))
        a.connection(wa2, people["dave"], "reconnecting_pty", "", at(D1, 12), at(D1, 12, 10))
        b.connection(wb1, people["alice"], "port_forwarding", "8080", at(D0, 14), at(D0, 14, 5))
        a.connection(wa1, None, "workspace_app", "code", at(D1, 15), at(D1, 15, 1))
        db.session.commit()
        rollup.roll_up_insights(app.config["SLIPWAY_SETTINGS"])
    return Fixture(people, alpha, beta)


def _rows(app: Flask) -> dict[str, list[tuple[Any, ...]]]:
    """Every rollup row (the person and app rows are replaced by each pass: their values are what counts)."""
    with app.app_context():
        db.session.expire_all()
        usage = [
            (r.template_id, r.day, r.active_users, r.builds, r.builds_succeeded, r.builds_failed,
             r.build_p50_seconds, r.build_p95_seconds, r.ready_p50_seconds, r.ready_p95_seconds,
             r.workspaces_by_status, r.computed_at)
            for r in db.session.scalars(select(TemplateUsageDaily))
        ]  # fmt: skip
        users = [(r.template_id, r.day, r.user_id, r.seconds) for r in db.session.scalars(select(TemplateUserDaily))]
        apps = [
            (r.template_id, r.day, r.kind, r.slug, r.sessions, r.seconds)
            for r in db.session.scalars(select(TemplateAppDaily))
        ]
        return {"usage": sorted(usage), "users": sorted(users), "apps": sorted(apps)}


def _range(first: date = D0, last: date = D1) -> str:
    return f"start_time={first.isoformat()}T00:00:00Z&end_time={(last + timedelta(days=1)).isoformat()}T00:00:00Z"


def test_the_rollup_holds_the_hand_counted_figures_and_a_second_run_changes_nothing(
    app: Flask, fixture: Fixture
) -> None:
    first = _rows(app)
    by_key = {(row[0], row[1]): row[2:-1] for row in first["usage"]}
    a, b = fixture.alpha, fixture.beta
    # active users, builds, succeeded, failed, build p50/p95, ready p50/p95, workspaces by status (today only)
    assert by_key[(a, D0)] == (1, 3, 2, 1, 60.0, 120.0, 100.0, 200.0, "{}")
    assert by_key[(b, D0)] == (1, 1, 1, 0, 90.0, 90.0, None, None, "{}")
    assert by_key[(a, D1)] == (2, 3, 2, 0, 45.0, 300.0, 400.0, 400.0, "{}")
    assert by_key[(b, D1)] == (0, 0, 0, 0, None, None, None, None, "{}")
    assert by_key[(a, TODAY)][-1] == '{"canceled": 1, "running": 1}'
    assert by_key[(b, TODAY)][-1] == '{"running": 1}'
    # The deployment's own rows: people once however many templates, p50/p95 over all the day's builds (D0's
    # succeeded runs 60, 90, 120 s; B's start had an agent that never became ready).
    assert by_key[(ALL_TEMPLATES, D0)] == (2, 4, 3, 1, 90.0, 120.0, 100.0, 200.0, "{}")
    assert by_key[(ALL_TEMPLATES, D1)] == (2, 3, 2, 0, 45.0, 300.0, 400.0, 400.0, "{}")
    assert by_key[(ALL_TEMPLATES, TODAY)][-1] == '{"canceled": 1, "running": 2}'
    people = fixture.people
    assert [row for row in first["users"] if row[1] in (D0, D1)] == sorted([
        (a, D0, people["carol"].id, 1800 + 3600), (a, D1, people["carol"].id, 3600), (a, D1, people["dave"].id, 600),
        (b, D0, people["alice"].id, 300),
    ])  # fmt: skip
    # The app session across midnight counts on the day it began, its time on both days (D1: 3600 + the visitor's 60).
    assert first["apps"] == sorted([
        (a, D0, "builtin", "ssh", 1, 1800), (a, D0, "app", "code", 1, 3600), (a, D1, "app", "code", 1, 3660),
        (a, D1, "builtin", "reconnecting-pty", 1, 600), (b, D0, "builtin", "port-forwarding", 1, 300),
    ])  # fmt: skip

    with app.app_context():
        assert rollup.roll_up(utcnow()) == 2  # today and yesterday again; nothing left to backfill
        assert rollup.roll_up_insights(app.config["SLIPWAY_SETTINGS"]) == 0  # the recent days were done just now
    assert _rows(app) == first


def test_the_api_answers_with_the_hand_counted_numbers(client: FlaskClient, fixture: Fixture) -> None:
    alice, people = fixture.people["alice"], fixture.people
    daus = client.get("/api/v2/insights/daus?tz_offset=2", headers=alice.auth)
    assert daus.status_code == 200, daus.json
    entries = {entry["date"]: entry["amount"] for entry in daus.json["entries"]}
    assert (entries[D0.isoformat()], entries[D1.isoformat()], entries[TODAY.isoformat()]) == (2, 2, 0)
    assert daus.json["tz_hour_offset"] == 2 and len(entries) == 30

    report = client.get(f"/api/v2/insights/templates?{_range()}&interval=day", headers=alice.auth)
    assert report.status_code == 200, report.json
    assert report.json["report"]["active_users"] == 3
    assert [r["active_users"] for r in report.json["interval_reports"]] == [2, 2]
    assert report.json["interval_reports"][1]["start_time"] == f"{D1.isoformat()}T00:00:00Z"
    apps = {
        (app["type"], app["slug"]): (app["seconds"], app["times_used"]) for app in report.json["report"]["apps_usage"]
    }
    assert apps == {("app", "code"): (7260, 2), ("builtin", "ssh"): (1800, 1),
                    ("builtin", "reconnecting-pty"): (600, 1), ("builtin", "port-forwarding"): (300, 1)}  # fmt: skip
    weekly = client.get(f"/api/v2/insights/templates?{_range()}&interval=week", headers=alice.auth)
    assert [r["active_users"] for r in weekly.json["interval_reports"]] == [3]
    only_a = client.get(f"/api/v2/insights/templates?{_range()}&template_ids={fixture.alpha}", headers=alice.auth)
    assert only_a.json["report"]["active_users"] == 2 and only_a.json["report"]["template_ids"] == [fixture.alpha]

    activity = client.get(f"/api/v2/insights/user-activity?{_range()}", headers=alice.auth)
    assert activity.status_code == 200, activity.json
    seconds = {user["username"]: user["seconds"] for user in activity.json["report"]["users"]}
    assert seconds == {"carol": 9000, "dave": 600, "alice": 300}
    assert [(u["username"], u["template_ids"]) for u in activity.json["report"]["users"]] == [
        ("carol", [fixture.alpha]), ("dave", [fixture.alpha]), ("alice", [fixture.beta])
    ]  # fmt: skip
    # A local-midnight range (UTC+2) reads the days it names: D1 alone.
    local = f"start_time={D1.isoformat()}T00:00:00%2B02:00&end_time={TODAY.isoformat()}T00:00:00%2B02:00"
    local_activity = client.get(f"/api/v2/insights/user-activity?{local}", headers=people["alice"].auth)
    assert {u["username"]: u["seconds"] for u in local_activity.json["report"]["users"]} == {"carol": 3600, "dave": 600}


def test_daily_active_users_in_a_time_zone_split_each_utc_day_by_its_hours(
    app: Flask, client: FlaskClient, fixture: Fixture
) -> None:
    """The fixture's sessions by UTC hour: carol D0 09:30 and 23:00-24:00, D1 00:00-01:00 (template A); alice D0
    14:00 (B); dave D1 12:00 (A). Ten hours west, carol's morning is the evening before D0, and her evening and the
    next midnight hour are D0's afternoon; fourteen hours east, alice's afternoon and carol's evening are D1's and
    dave's noon is today's."""
    people, alpha = fixture.people, fixture.alpha
    with app.app_context():
        hours = {
            (row.day, row.user_id): row.active_hours
            for row in db.session.scalars(select(TemplateUserDaily).where(TemplateUserDaily.template_id == alpha))
        }
    assert hours[(D0, people["carol"].id)] == 1 << 9 | 1 << 23
    assert hours[(D1, people["carol"].id)] == 1 << 0 and hours[(D1, people["dave"].id)] == 1 << 12

    def daus(query: str) -> dict[date, int]:
        answer = client.get(f"/api/v2/insights/daus?{query}", headers=people["alice"].auth)
        assert answer.status_code == 200, answer.json
        return {date.fromisoformat(entry["date"]): entry["amount"] for entry in answer.json["entries"]}

    west = daus("tz_offset=-10")
    assert (west[D0 - timedelta(days=1)], west[D0], west[D1]) == (1, 2, 1)
    assert max(west) == (utcnow() - timedelta(hours=10)).date()  # the last day is today there
    east = daus("tz_offset=14")
    assert (east.get(D0 - timedelta(days=1), 0), east[D0], east[D1], east[TODAY]) == (0, 1, 2, 1)
    only_a = daus(f"tz_offset=-10&template_ids={alpha}")
    assert (only_a[D0 - timedelta(days=1)], only_a[D0], only_a[D1]) == (1, 1, 1)
    utc = daus("tz_offset=0")
    assert (utc[D0], utc[D1]) == (2, 2)

    # Rows rolled up before the hours were kept (0) count on their UTC day in any zone.
    with app.app_context():
        db.session.execute(update(TemplateUserDaily).values(active_hours=0))
        db.session.commit()
    assert (daus("tz_offset=-10")[D0], daus("tz_offset=-10")[D1]) == (2, 2)


def test_percentiles_over_several_templates_come_from_their_summed_histograms(app: Flask, fixture: Fixture) -> None:
    """D0's succeeded builds ran 60 and 120 s (A) and 90 s (B): over both templates the p50 is B's 90 s (to within
    the histograms' accuracy), where weighting each template's own p50 by its builds would say 70 s. Days rolled up
    before the histograms existed keep the weighted figures."""
    both = [fixture.alpha, fixture.beta]
    with app.app_context():
        d0 = query.daily_builds(both, query.day_range(D0, D0))[0]
        assert d0.builds == 4 and d0.succeeded == 3
        for value, exact in ((d0.build_p50, 90), (d0.build_p95, 120), (d0.ready_p50, 100), (d0.ready_p95, 200)):
            assert value is not None and abs(value - exact) <= histograms.ACCURACY * exact, (value, exact)
        db.session.execute(update(TemplateUsageDaily).values(build_histogram=None))
        db.session.commit()
        assert query.daily_builds(both, query.day_range(D0, D0))[0].build_p50 == pytest.approx(70)
        # One template's own figures stay exact.
        assert query.daily_builds([fixture.alpha], query.day_range(D0, D0))[0].build_p50 == 60


def test_a_histogram_reads_every_percentile_within_its_accuracy() -> None:
    rng = random.Random(38)
    durations = [rng.lognormvariate(4, 1.2) for _ in range(5_000)] + [0.0, 0.001, 86_400.0]
    counts: Counter[int] = Counter()
    histograms.add(counts, histograms.encode(durations[:2_000]))
    histograms.add(counts, histograms.encode(durations[2_000:]))
    for share in (0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0):
        exact = max(rollup.percentile(durations, share) or 0, histograms.SMALLEST_SECONDS)
        found = histograms.percentile(counts, share)
        assert found is not None and abs(found - exact) <= histograms.ACCURACY * exact, (share, found, exact)
    assert histograms.encode(reversed(durations)) == histograms.encode(durations)
    assert histograms.percentile(Counter(), 0.5) is None


def test_owners_auditors_and_a_templates_admin_read_insights_members_do_not(
    app: Flask, client: FlaskClient, fixture: Fixture
) -> None:
    people = fixture.people
    with app.app_context():
        from app.users.models import User

        frank = db.session.get_one(User, people["frank"].id)
        frank.roles = ["auditor"]
        db.session.commit()
    path = f"/api/v2/insights/user-activity?{_range()}"
    for name in ("alice", "bob", "frank"):  # owner, template admin, auditor: every template
        response = client.get(path, headers=people[name].auth)
        assert {u["username"] for u in response.json["report"]["users"]} == {"carol", "dave", "alice"}, name
    erin = client.get(path, headers=people["erin"].auth)  # administers template A through its access list
    assert {u["username"] for u in erin.json["report"]["users"]} == {"carol", "dave"}
    assert client.get(f"{path}&template_ids={fixture.beta}", headers=people["erin"].auth).status_code == 403
    for endpoint in ("daus", f"templates?{_range()}", f"user-activity?{_range()}"):
        assert client.get(f"/api/v2/insights/{endpoint}", headers=people["carol"].auth).status_code == 403
        assert client.get(f"/api/v2/insights/{endpoint}").status_code == 401

    page = app.test_client()
    sign_in(page, "erin@example.com", people["erin"].password)
    body = page.get(f"/insights?start={D0}&end={D1}").get_data(as_text=True)
    assert "alpha" in body and "beta" not in body and 'href="/insights"' in body
    page = app.test_client()
    sign_in(page, "carol@example.com", people["carol"].password)
    assert page.get("/insights").status_code == 403
    assert 'href="/insights"' not in page.get("/workspaces").get_data(as_text=True)
    assert app.test_client().get("/insights").status_code == 302


def test_the_page_draws_each_chart_with_its_numbers(app: Flask, fixture: Fixture) -> None:
    page = app.test_client()
    sign_in(page, "alice@example.com", fixture.people["alice"].password)
    response = page.get(f"/insights?start={D0}&end={D1}")
    assert response.status_code == 200
    body = response.get_data(as_text=True)
    assert 'id="summary-active-users">3<' in body and 'id="summary-builds">7<' in body
    assert 'id="summary-success-rate">83%<' in body  # 5 of the 6 that ended either way (one failed; one canceled)
    for key in ("users", "builds", "build-time", "ready-time", "apps"):
        assert f'<title id="{key}-title">' in body and f'aria-labelledby="{key}-title {key}-desc"' in body
    assert f'<th scope="row">{D0}</th><td>2</td>' in body  # active users on D0
    assert '<th scope="row">code</th><td>121.0</td>' in body  # 7260 s of the app, in minutes
    assert f'<th scope="row">{D0}</th><td>90.0</td><td>120.0</td>' in body  # all builds' p50/p95, not a blend
    assert " style=" not in body.split("<main", 1)[-1]  # the CSP forbids inline styles: none in the charts
    only_b = page.get(f"/insights?start={D0}&end={D1}&template={fixture.beta}").get_data(as_text=True)
    assert 'id="summary-active-users">1<' in only_b and '<th scope="row">Port forwarding</th><td>5.0</td>' in only_b
    today = page.get("/insights").get_data(as_text=True)  # the last 28 days: today's workspaces by status
    assert '<th scope="row">running</th><td>2</td>' in today


def test_a_year_is_drawn_a_week_per_point_with_the_same_counts(app: Flask, fixture: Fixture) -> None:
    page = app.test_client()
    sign_in(page, "alice@example.com", fixture.people["alice"].password)
    body = page.get(f"/insights?start={TODAY - timedelta(days=364)}&end={TODAY}").get_data(as_text=True)
    assert 'id="summary-active-users">3<' in body and 'id="summary-builds">7<' in body
    assert "Builds per week" in body and "a week&#39;s average" in body and "a point per week" in body
    week = f"{TODAY - timedelta(days=7)} to {TODAY - timedelta(days=1)}"  # holds D0 and D1
    with app.app_context():  # that week's people per day, averaged
        daily = query.daily_active_users(None, query.day_range(TODAY - 7 * query.DAY, TODAY - query.DAY))
    assert f'<th scope="row">{week}</th><td>{round(sum(daily.values()) / 7, 1):g}</td>' in body
    assert f'<th scope="row">{week}</th><td>5</td><td>1</td><td>1</td>' in body  # succeeded, failed, other
    # 53 periods (52 weeks from the first day, then today alone) in each timeline chart's table, not 365 days.
    assert body.count(f'<th scope="row">{TODAY - timedelta(days=364)} to {TODAY - timedelta(days=358)}</th>') == 4
    assert f'<th scope="row">{TODAY}</th>' in body and f'<th scope="row">{D0}</th>' not in body
    ninety = page.get(f"/insights?start={TODAY - timedelta(days=89)}&end={TODAY}").get_data(as_text=True)
    assert "Builds per day" in ninety and f'<th scope="row">{D0}</th>' in ninety


def test_a_weeks_percentiles_are_its_days_weighted_by_their_succeeded_builds() -> None:
    from app.insights.views import _weekly

    first = date(2026, 1, 5)
    days = [
        query.DayBuilds(first, 4, 3, 1, 10.0, 20.0, None, None),
        query.DayBuilds(first + query.DAY, 1, 1, 0, 30.0, 40.0, 5.0, None),
        query.DayBuilds(first + 2 * query.DAY, 2, 0, 1, None, None, None, None),
    ]
    (week,) = _weekly(days, [(first, first + 2 * query.DAY)])
    assert (week.day, week.builds, week.succeeded, week.failed) == (first, 7, 4, 2)
    assert (week.build_p50, week.build_p95, week.ready_p50, week.ready_p95) == (15.0, 25.0, 5.0, None)


BAD_QUERIES = (
    "",  # no range
    "start_time=2026-11-01T00:00:00Z",
    "start_time=2026-11-01T00:30:00Z&end_time=2026-11-02T00:00:00Z",  # not on the hour
    "start_time=2026-11-02T00:00:00Z&end_time=2026-11-01T00:00:00Z",  # start after end
    "start_time=2025-01-01T00:00:00Z&end_time=2026-11-01T00:00:00Z",  # over a year
    "start_time=yesterday&end_time=2026-11-01T00:00:00Z",
    "start_time=2026-11-01T00:00:00&end_time=2026-11-02T00:00:00",  # no zone
    "start_time=2026-11-01T00:00:00Z&end_time=2026-11-02T00:00:00Z&template_ids=nope",
    "start_time=2026-11-01T00:00:00Z&end_time=2026-11-02T00:00:00Z&interval=month",
)


def test_bad_query_input_is_a_400_that_says_which_field(client: FlaskClient, personas: dict[str, Persona]) -> None:
    answers = {
        query: client.get(f"/api/v2/insights/templates?{query}", headers=personas["alice"].auth)
        for query in BAD_QUERIES
    }
    assert {query: (r.status_code, bool(r.json["validations"])) for query, r in answers.items()} == {
        query: (400, True) for query in BAD_QUERIES
    }


def test_bad_tz_offset_and_page_dates_are_400s(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    for offset in ("99", "two"):
        assert (
            client.get(f"/api/v2/insights/daus?tz_offset={offset}", headers=personas["alice"].auth).status_code == 400
        )
    page = app.test_client()
    sign_in(page, "alice@example.com", personas["alice"].password)
    for asked in ("start=yesterday", "start=2026-11-02&end=2026-11-01", "start=2024-01-01&end=2026-11-01"):
        response = page.get(f"/insights?{asked}")
        assert response.status_code == 400 and 'role="alert"' in response.get_data(as_text=True), asked


def test_the_backfill_walks_back_a_bounded_number_of_days_per_pass(
    app: Flask, fixture: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture's first pass reached D0 (the oldest data); a connection five days ago is reached one day per pass
    when a pass may take one day."""
    monkeypatch.setattr(rollup, "BACKFILL_DAYS", 1)
    with app.app_context():
        old = ConnectionLog(type="ssh", via="tunnel", user_id=fixture.people["dave"].id, organization_id="o",
                            workspace_id="w", workspace_name="w", workspace_owner_id="o", workspace_owner_username="",
                            template_id=fixture.alpha, agent_name="main", connect_time=at(TODAY - timedelta(days=5), 8),
                            disconnect_time=at(TODAY - timedelta(days=5), 9), last_seen_at=at(TODAY, 0))  # fmt: skip
        db.session.add(old)
        db.session.commit()
        oldest = []
        for _ in range(4):
            rollup.roll_up_insights(app.config["SLIPWAY_SETTINGS"])
            oldest.append(db.session.scalar(select(func.min(TemplateUsageDaily.day))))
    assert oldest == [TODAY - timedelta(days=n) for n in (3, 4, 5, 5)]
    assert (fixture.alpha, TODAY - timedelta(days=5), fixture.people["dave"].id, 3600) in _rows(app)["users"]
