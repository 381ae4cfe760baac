"""The dashboard's lifecycle controls: the schedule card, the outdated banner and the update form that asks for a
new version's parameters, the dormancy banner, and the Account page's quiet hours, preferences and inbox. Forms
carry CSRF tokens; another member cannot use them on someone else's workspace."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.datastructures import MultiDict

from app.core.columns import utcnow
from app.core.extensions import db
from app.notifications import services as notifications
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from tests.conftest import PASSWORD, Persona
from tests.support.web import csrf_token, post_form, sign_in
from tests.test_workspace_updates import PARAMETERS_V2, World

pytestmark = pytest.mark.databases("sqlite")


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> World:
    return World(client, personas)


def browser(app: Flask, who: str) -> FlaskClient:
    pages = app.test_client()
    sign_in(pages, f"{who}@example.com", PASSWORD)
    return pages


def post_fields(client: FlaskClient, path: str, fields: list[tuple[str, str]], *, token_from: str) -> Any:
    """A form post with repeated fields (the day picker's boxes), which post_form's dict cannot carry."""
    return client.post(path, data=MultiDict([*fields, ("csrf_token", csrf_token(client, token_from))]))


def test_the_schedule_card_sets_autostart_and_autostop(app: Flask, world: World) -> None:
    workspace = world.create()
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    page = carol.get(path).get_data(as_text=True)
    assert 'id="schedule-card"' in page and "manually" in page
    # Nothing saved yet: the zone select is left for the browser's zone (static/schedule.js), UTC without it.
    assert "data-browser-zone" in page and "<option selected>UTC</option>" in page
    weekdays = [("day", day) for day in ("mon", "tue", "wed", "thu", "fri")]
    form = [("start_time", "09:30"), *weekdays, ("zone", "Europe/Berlin"), ("ttl_hours", "8")]
    assert post_fields(carol, f"{path}/schedule", form, token_from=path).status_code == 302
    seen = world.get(workspace["id"])
    assert seen["autostart_schedule"] == "CRON_TZ=Europe/Berlin 30 9 * * mon-fri" and seen["ttl_ms"] == 8 * 3_600_000
    page = carol.get(path).get_data(as_text=True)
    assert '<span id="schedule-sentence">Weekdays at 09:30, Berlin time</span>' in page and "next <strong>" in page
    # Saved: the picker opens on it, and the zone is the saved one, not the browser's.
    assert "<option selected>Europe/Berlin</option>" in page and "data-browser-zone" not in page
    assert page.count('name="day" value="mon" checked') == 1 and 'value="sat" checked' not in page
    # Someone else's workspace: not found; no token: refused.
    dave = browser(app, "dave")
    assert post_fields(dave, f"{path}/schedule", form, token_from="/workspaces").status_code == 404
    assert carol.post(f"{path}/schedule", data=MultiDict(form)).status_code == 400


def test_a_refused_schedule_form_keeps_every_edit_and_names_each_field(app: Flask, world: World) -> None:
    workspace = world.create()
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    # An unknown zone: a field error, the page again (a 400) with the days, time and TTL as they were sent.
    sent = [("zone", "Mars/Olympus"), ("day", "tue"), ("day", "thu"), ("start_time", "07:45"), ("ttl_hours", "3.5")]
    refused = post_fields(carol, f"{path}/schedule", [*sent, ("automatic_updates", "on")], token_from=path)
    page = refused.get_data(as_text=True)
    assert refused.status_code == 400 and 'id="form-errors"' in page and '<a href="#zone">Time zone</a>' in page
    assert '<option value="Mars/Olympus" selected>' in page and 'id="zone-error">Unknown time zone' in page
    assert 'aria-invalid="true" aria-describedby="zone-error"' in page
    assert 'value="tue" checked' in page and 'value="thu" checked' in page and 'value="mon" checked' not in page
    assert 'value="07:45"' in page and 'value="3.5"' in page and 'name="automatic_updates" checked' in page
    assert "<details open><summary>Edit schedule" in page
    # No day, a bad autostop, a cron that does not parse: each named at its field, nothing saved.
    cases = [
        ([("zone", "UTC"), ("start_time", "09:00")], "days", "Pick at least one day"),
        ([("zone", "UTC"), ("ttl_hours", "soon")], "ttl-hours", "number of hours"),
        ([("zone", "UTC"), ("ttl_hours", "1e400")], "ttl-hours", "number of hours"),
        ([("zone", "UTC"), ("start_time", "25:00"), ("day", "mon")], "start-time", "HH:MM"),
        ([("zone", "UTC"), ("cron", "0 9 1 * *")], "cron", "Day of month"),
    ]
    for fields, field_id, why in cases:
        response = post_fields(carol, f"{path}/schedule", fields, token_from=path)
        text = response.get_data(as_text=True)
        assert response.status_code == 400, fields
        assert f'id="{field_id}-error">' in text and why in text, fields
    assert '<details class="advanced-cron" open>' in text and 'value="0 9 1 * *"' in text
    assert world.get(workspace["id"])["autostart_schedule"] is None
    # A cron the picker cannot say: saved, shown with "(custom)", and opens in the cron field.
    custom = [("zone", "Europe/Lisbon"), ("cron", "*/30 9-17 * * 1-5")]
    assert post_fields(carol, f"{path}/schedule", custom, token_from=path).status_code == 302
    page = carol.get(path).get_data(as_text=True)
    assert "*/30 9-17 * * 1-5 (custom), Lisbon time" in page and 'value="*/30 9-17 * * 1-5"' in page
    # A template that sets the autostop: refused as a whole (the autostart is not saved either), not a 500.
    with app.app_context():
        db.session.get(Workspace, workspace["id"]).template.allow_user_autostop = False
        db.session.commit()
    both = [("zone", "UTC"), ("day", "mon"), ("start_time", "06:00"), ("ttl_hours", "2")]
    forbidden = post_fields(carol, f"{path}/schedule", both, token_from=path)
    assert forbidden.status_code == 403 and "sets the autostop" in forbidden.get_data(as_text=True)
    assert world.get(workspace["id"])["autostart_schedule"] == "CRON_TZ=Europe/Lisbon */30 9-17 * * 1-5"


def test_update_asks_for_the_new_versions_parameters_then_builds_it(app: Flask, world: World) -> None:
    workspace = world.create()
    v2 = world.push(PARAMETERS_V2)
    world.promote(v2)
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    page = carol.get(path).get_data(as_text=True)
    assert 'id="outdated-banner"' in page and ">Update<" in page
    listed = carol.get("/workspaces").get_data(as_text=True)
    assert "outdated" in listed
    asked = post_form(carol, f"{path}/update", {}, token_from=path)
    assert asked.status_code == 200
    form_page = asked.get_data(as_text=True)
    assert 'name="param:zone"' in form_page and 'name="param:region"' in form_page
    values = {"param:region": "us", "param:zone": "b", "param:size": "6"}
    built = post_form(carol, f"{path}/update", values, token_from=f"{path}/update")
    # size: 6 no longer passes (at most 4 now), and it may not go down: still asked, nothing built.
    assert built.status_code == 400 and "param:size" in built.get_data(as_text=True)
    # The field that failed is marked, keeps what was typed, and the summary names it; the others are not marked.
    refused_page = built.get_data(as_text=True)
    size_field = re.search(r'<input id="param-size"[^>]*>', refused_page)
    assert size_field and 'aria-invalid="true"' in size_field.group(0) and 'value="6"' in size_field.group(0)
    assert "1 field needs a change" in refused_page and refused_page.count('aria-invalid="true"') == 1
    assert world.get(workspace["id"])["latest_build"]["template_version_id"] != v2
    world.client.patch(
        f"/api/v2/templates/{world.template['id']}/versions",
        json={"id": world.push([{**PARAMETERS_V2[0], "validation_max": 8}, *PARAMETERS_V2[1:]])},
        headers=world.personas["bob"].auth,
    )
    built = post_form(carol, f"{path}/update", values, token_from=f"{path}/update")
    assert built.status_code == 302 and "/builds/" in built.headers["Location"]
    latest = world.get(workspace["id"])
    assert latest["outdated"] is False and latest["latest_build"]["transition"] == "start"


def test_the_dormancy_banner_and_activate(app: Flask, world: World) -> None:
    workspace = world.create()
    with app.app_context():
        row = db.session.get(Workspace, workspace["id"])
        assert row is not None
        row.dormant_at = utcnow()
        db.session.commit()
        db.session.remove()
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    assert 'id="dormancy-banner"' in carol.get(path).get_data(as_text=True)
    assert post_form(carol, f"{path}/activate", {}, token_from=path).status_code == 302
    assert world.get(workspace["id"])["dormant_at"] is None
    assert 'id="dormancy-banner"' not in carol.get(path).get_data(as_text=True)


def test_account_quiet_hours_preferences_and_inbox(app: Flask, personas: dict[str, Any]) -> None:
    carol = browser(app, "carol")
    page = carol.get("/account").get_data(as_text=True)
    assert 'Every day at 00:00, UTC</strong> <span class="muted">(the default)' in page and 'id="inbox"' in page
    assert "data-browser-zone" in page
    bad = post_form(
        carol, "/account/quiet-hours", {"zone": "Europe/Paris", "cron": "0 22 * * 1-5"}, token_from="/account"
    )
    text = bad.get_data(as_text=True)
    assert bad.status_code == 400 and "one time every day" in text and 'id="quiet-cron-error"' in text
    assert 'value="0 22 * * 1-5"' in text and "<option selected>Europe/Paris</option>" in text
    unknown = post_form(
        carol, "/account/quiet-hours", {"zone": "Nowhere/Land", "start_time": "21:15"}, token_from="/account"
    )
    text = unknown.get_data(as_text=True)
    assert unknown.status_code == 400 and 'id="quiet-zone-error">Unknown time zone' in text and 'value="21:15"' in text
    assert 'id="form-errors"' in text and '<a href="#quiet-zone">Time zone</a>' in text
    empty = post_form(carol, "/account/quiet-hours", {"zone": "UTC", "start_time": ""}, token_from="/account")
    assert empty.status_code == 400 and 'id="quiet-start-time-error"' in empty.get_data(as_text=True)
    good = post_form(
        carol, "/account/quiet-hours", {"zone": "Europe/Paris", "start_time": "22:00"}, token_from="/account"
    )
    assert good.status_code == 302
    page = carol.get("/account").get_data(as_text=True)
    assert "Every day at 22:00, Paris time</strong>" in page and "(the default)" not in page
    assert 'id="quiet-start-time" name="start_time" value="22:00"' in page and "data-browser-zone" not in page
    with app.app_context():
        assert db.session.get(User, personas["carol"].id).quiet_hours_schedule == "CRON_TZ=Europe/Paris 0 22 * * *"
    # Only the ticked events stay on.
    chosen = {"build_failed": "on"}
    assert post_form(carol, "/account/notifications", chosen, token_from="/account").status_code == 302
    with app.app_context():
        prefs = notifications.preferences(personas["carol"].id)
        assert prefs["build_failed"] and not prefs["workspace_autostopped"]
        notifications.notify(
            personas["carol"].id, notifications.BUILD_FAILED, title="Start of dev failed", link="/builds/x"
        )
        db.session.commit()
        db.session.remove()
    assert "Start of dev failed" in carol.get("/account").get_data(as_text=True)
    assert carol.post("/account/quiet-hours", data={"zone": "UTC", "start_time": "01:00"}).status_code == 400
    assert csrf_token(carol, "/account")


def test_before_promoting_the_version_page_says_what_it_would_do(app: Flask, world: World) -> None:
    world.create()
    v2 = world.push(PARAMETERS_V2)
    bob = browser(app, "bob")
    assert 'id="promotion-check"' in bob.get(f"/templates/versions/{v2}").get_data(as_text=True)
    fragment = bob.get(f"/templates/versions/{v2}/promotion-check").get_data(as_text=True)
    assert "<strong>1</strong> workspace would be outdated" in fragment
    assert "carol/ws (region, size, zone)" in fragment
    assert browser(app, "carol").get(f"/templates/versions/{v2}/promotion-check").status_code == 403


def test_automatic_updates_from_the_schedule_card_and_reasons_in_the_build_list(app: Flask, world: World) -> None:
    workspace = world.create()
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    form = {"start_time": "", "start_days": "*", "zone": "UTC", "ttl_hours": "", "automatic_updates": "on"}
    assert post_form(carol, f"{path}/schedule", form, token_from=path).status_code == 302
    assert world.get(workspace["id"])["automatic_updates"] == "always"
    world.stop(workspace["id"])
    with app.app_context():
        build = db.session.scalars(
            db.select(WorkspaceBuild)
            .where(WorkspaceBuild.workspace_id == workspace["id"])
            .order_by(WorkspaceBuild.build_number.desc())
        ).first()
        assert build is not None
        build.reason = "autostop"
        db.session.commit()
        db.session.remove()
    assert ">autostop</span>" in carol.get(path).get_data(as_text=True)


def test_template_settings_page(app: Flask, world: World) -> None:
    name = world.template["name"]
    path = f"/templates/{name}/settings"
    assert browser(app, "carol").get(path).status_code == 403
    bob = browser(app, "bob")
    assert 'id="template-settings"' in bob.get(f"/templates/{name}").get_data(as_text=True)
    form = {
        "display_name": "Dev boxes", "description": "For everyone", "icon": "/icon/code.svg", "default_ttl_hours": "8",
        "activity_bump_minutes": "60", "failure_ttl_hours": "1", "dormancy_days": "30", "autodelete_days": "14",
        "allow_user_autostart": "on", "requirement_saturday": "on", "requirement_sunday": "on",
        "requirement_weeks": "1", "require_active_version": "on",
    }  # fmt: skip
    saved = post_form(bob, path, form)
    assert saved.status_code == 302, saved.get_data(as_text=True)[:500]
    template = world.client.get(f"/api/v2/templates/{world.template['id']}", headers=world.personas["bob"].auth).json
    assert template["display_name"] == "Dev boxes" and template["default_ttl_ms"] == 8 * 3_600_000
    assert template["time_til_dormant_ms"] == 30 * 24 * 3_600_000 and template["allow_user_autostop"] is False
    assert template["autostop_requirement"]["days_of_week"] == ["saturday", "sunday"]
    assert template["require_active_version"] is True
    refused = post_form(bob, path, {**form, "display_name": "Changed", "default_ttl_hours": "-1", "icon": "ftp://x"})
    assert refused.status_code == 400
    page = refused.get_data(as_text=True)
    assert "Must be a whole number of milliseconds" in page and "https:// URL" in page
    again = world.client.get(f"/api/v2/templates/{world.template['id']}", headers=world.personas["bob"].auth).json
    assert again["display_name"] == "Dev boxes"


def test_admins_have_a_page_of_what_goes_dormant_next(app: Flask, world: World) -> None:
    world.create()
    world.client.patch(
        f"/api/v2/templates/{world.template['id']}", json={"time_til_dormant_ms": 86_400_000},
        headers=world.personas["bob"].auth,
    )  # fmt: skip
    assert browser(app, "carol").get("/workspaces/lifecycle").status_code == 403
    page = browser(app, "bob").get("/workspaces/lifecycle").get_data(as_text=True)
    assert 'id="dormant-next"' in page and "carol/ws" in page


def test_the_schedule_cards_plus_and_minus_move_the_stop(app: Flask, world: World) -> None:
    world.client.patch(
        f"/api/v2/templates/{world.template['id']}", json={"default_ttl_ms": 8 * 3_600_000},
        headers=world.personas["bob"].auth,
    )  # fmt: skip
    workspace = world.create()
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    first = datetime.fromisoformat(world.get(workspace["id"])["latest_build"]["deadline"])
    assert post_form(carol, f"{path}/extend", {"hours": "1"}, token_from=path).status_code == 302
    assert datetime.fromisoformat(world.get(workspace["id"])["latest_build"]["deadline"]) == first + timedelta(hours=1)
    assert post_form(carol, f"{path}/extend", {"hours": "-1"}, token_from=path).status_code == 302
    assert datetime.fromisoformat(world.get(workspace["id"])["latest_build"]["deadline"]) == first
    # Sooner than 30 minutes from now: refused with the reason, the stop stays.
    post_form(carol, f"{path}/extend", {"hours": "-8"}, token_from=path)
    assert "at least 30 minutes from now" in carol.get(path).get_data(as_text=True)
    assert datetime.fromisoformat(world.get(workspace["id"])["latest_build"]["deadline"]) == first
