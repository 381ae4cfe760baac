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

from app.core.columns import utcnow
from app.core.extensions import db
from app.notifications import services as notifications
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


def test_the_schedule_card_sets_autostart_and_autostop(app: Flask, world: World) -> None:
    workspace = world.create()
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    page = carol.get(path).get_data(as_text=True)
    assert 'id="schedule-card"' in page and "manually" in page
    form = {"start_time": "09:30", "start_days": "mon-fri", "zone": "Europe/Berlin", "ttl_hours": "8"}
    assert post_form(carol, f"{path}/schedule", form, token_from=path).status_code == 302
    seen = world.get(workspace["id"])
    assert seen["autostart_schedule"] == "CRON_TZ=Europe/Berlin 30 9 * * mon-fri" and seen["ttl_ms"] == 8 * 3_600_000
    page = carol.get(path).get_data(as_text=True)
    assert "CRON_TZ=Europe/Berlin 30 9 * * mon-fri" in page and "next <strong>" in page
    # A zone that does not exist: the page says so and nothing changes.
    bad = {**form, "zone": "Mars/Olympus"}
    assert post_form(carol, f"{path}/schedule", bad, token_from=path).status_code == 302
    assert "Unknown time zone" in carol.get(path).get_data(as_text=True)
    assert world.get(workspace["id"])["autostart_schedule"] == "CRON_TZ=Europe/Berlin 30 9 * * mon-fri"
    # Someone else's workspace: not found; no token: refused.
    dave = browser(app, "dave")
    assert post_form(dave, f"{path}/schedule", form, token_from="/workspaces").status_code == 404
    assert carol.post(f"{path}/schedule", data=form).status_code == 400


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
    assert "CRON_TZ=UTC 0 0 * * *" in page and 'id="inbox"' in page
    bad = post_form(carol, "/account/quiet-hours", {"schedule": "CRON_TZ=UTC 0 22 * * 1-5"}, token_from="/account")
    assert bad.status_code == 400 and "one time every day" in bad.get_data(as_text=True)
    good = post_form(
        carol, "/account/quiet-hours", {"schedule": "CRON_TZ=Europe/Paris 0 22 * * *"}, token_from="/account"
    )
    assert good.status_code == 302
    assert "CRON_TZ=Europe/Paris 0 22 * * *" in carol.get("/account").get_data(as_text=True)
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
    assert carol.post("/account/quiet-hours", data={"schedule": "CRON_TZ=UTC 0 1 * * *"}).status_code == 400
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
