"""API.md "Workspace lifecycle": who may set schedules, TTLs, dormancy, automatic updates, template settings and
quiet hours, and a 400 naming the field for every bad value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.daemon import FakeDaemon, held_first_build, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.fixture
def setup(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> dict[str, Any]:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    workspace = held_first_build(client, personas, daemon, template)
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    return {"template": template, "workspace": workspace}


def put(client: FlaskClient, persona: Persona, path: str, body: object) -> Any:
    return client.put(f"/api/v2{path}", json=body, headers=persona.auth)


def test_the_owner_sets_an_autostart_schedule_and_others_cannot(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    path = f"/workspaces/{setup['workspace']['id']}/autostart"
    schedule = "CRON_TZ=Europe/Berlin 30 9 * * 1-5"
    assert put(client, personas["dave"], path, {"schedule": schedule}).status_code == 404
    # A template admin reads every workspace but does not change other people's.
    assert put(client, personas["bob"], path, {"schedule": schedule}).status_code == 403
    assert put(client, personas["carol"], path, {"schedule": schedule}).status_code == 204
    workspace = client.get(f"/api/v2/workspaces/{setup['workspace']['id']}", headers=personas["carol"].auth).json
    assert workspace["autostart_schedule"] == schedule
    next_start = datetime.fromisoformat(workspace["next_start_at"])
    assert next_start.astimezone(UTC) > datetime.now(UTC)
    assert put(client, personas["alice"], path, {"schedule": None}).status_code == 204
    workspace = client.get(f"/api/v2/workspaces/{setup['workspace']['id']}", headers=personas["carol"].auth).json
    assert workspace["autostart_schedule"] is None and workspace["next_start_at"] is None


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("autostart", {"schedule": "30 9 * * 1-5"}, "schedule"),
        ("autostart", {"schedule": "CRON_TZ=Mars/Olympus 30 9 * * *"}, "schedule"),
        ("autostart", {"schedule": "CRON_TZ=UTC 61 9 * * *"}, "schedule"),
        ("autostart", {"schedule": 5}, "schedule"),
        ("ttl", {"ttl_ms": 1000}, "ttl_ms"),
        ("ttl", {"ttl_ms": 31 * 24 * 3_600_000}, "ttl_ms"),
        ("ttl", {"ttl_ms": "8h"}, "ttl_ms"),
        ("autoupdates", {"automatic_updates": "sometimes"}, "automatic_updates"),
        ("dormant", {"dormant": "yes"}, "dormant"),
        ("extend", {"deadline": "tomorrow"}, "deadline"),
        ("extend", {"deadline": "2026-01-01T00:00:00Z"}, "deadline"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any], path: str, body: object, field: str
) -> None:
    reply = put(client, personas["carol"], f"/workspaces/{setup['workspace']['id']}/{path}", body)
    assert reply.status_code == 400, reply.json
    assert [item["field"] for item in reply.json["validations"]] == [field]


def test_a_template_that_forbids_schedules_answers_403(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    template_path = f"/api/v2/templates/{setup['template']['id']}"
    body = {"allow_user_autostart": False, "allow_user_autostop": False}
    assert client.patch(template_path, json=body, headers=personas["carol"].auth).status_code == 403
    assert client.patch(template_path, json=body, headers=personas["bob"].auth).status_code == 200
    workspace_path = f"/workspaces/{setup['workspace']['id']}"
    assert (
        put(client, personas["carol"], f"{workspace_path}/autostart", {"schedule": "CRON_TZ=UTC 0 9 * * *"}).status_code
        == 403
    )
    assert put(client, personas["carol"], f"{workspace_path}/ttl", {"ttl_ms": 3_600_000}).status_code == 403


def test_ttl_is_truncated_to_minutes(client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]) -> None:
    workspace_id = setup["workspace"]["id"]
    assert put(client, personas["carol"], f"/workspaces/{workspace_id}/ttl", {"ttl_ms": 3_600_123}).status_code == 204
    assert client.get(f"/api/v2/workspaces/{workspace_id}", headers=personas["carol"].auth).json["ttl_ms"] == 3_600_000


def test_template_settings_are_checked_all_at_once_and_nothing_changes_on_error(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    path = f"/api/v2/templates/{setup['template']['id']}"
    bad = {
        "default_ttl_ms": -1, "activity_bump_ms": 10, "allow_user_autostart": "no", "icon": "javascript:alert(1)",
        "autostop_requirement": {"days_of_week": ["funday"], "weeks": 0}, "colour": "red", "display_name": "Dev",
    }  # fmt: skip
    reply = client.patch(path, json=bad, headers=personas["bob"].auth)
    assert reply.status_code == 400
    assert {item["field"] for item in reply.json["validations"]} == {
        "default_ttl_ms", "activity_bump_ms", "allow_user_autostart", "icon", "autostop_requirement.days_of_week",
        "autostop_requirement.weeks", "colour",
    }  # fmt: skip
    assert client.get(path, headers=personas["bob"].auth).json["display_name"] != "Dev"
    good = {
        "display_name": "Dev boxes", "default_ttl_ms": 8 * 3_600_000, "failure_ttl_ms": 600_000,
        "time_til_dormant_ms": 7 * 24 * 3_600_000, "time_til_dormant_autodelete_ms": 30 * 24 * 3_600_000,
        "autostop_requirement": {"days_of_week": ["saturday", "sunday"], "weeks": 1}, "require_active_version": True,
    }  # fmt: skip
    reply = client.patch(path, json=good, headers=personas["alice"].auth)
    assert reply.status_code == 200, reply.json
    assert reply.json["autostop_requirement"] == {"days_of_week": ["saturday", "sunday"], "weeks": 1}
    assert reply.json["require_active_version"] is True and reply.json["default_ttl_ms"] == 8 * 3_600_000


def test_dormancy_by_hand_and_waking_up(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    client.patch(
        f"/api/v2/templates/{setup['template']['id']}",
        json={"time_til_dormant_autodelete_ms": 24 * 3_600_000},
        headers=personas["bob"].auth,
    )
    path = f"/workspaces/{setup['workspace']['id']}/dormant"
    assert put(client, personas["dave"], path, {"dormant": True}).status_code == 404
    reply = put(client, personas["bob"], path, {"dormant": True})
    assert reply.status_code == 200 and reply.json["dormant_at"] and reply.json["deleting_at"]
    reply = put(client, personas["carol"], path, {"dormant": False})
    assert reply.status_code == 200 and reply.json["dormant_at"] is None and reply.json["deleting_at"] is None


def test_extend_moves_the_deadline_but_not_past_max_deadline(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    path = f"/workspaces/{setup['workspace']['id']}/extend"
    later = (datetime.now(UTC) + timedelta(hours=3)).isoformat()
    assert put(client, personas["dave"], path, {"deadline": later}).status_code == 404
    reply = put(client, personas["carol"], path, {"deadline": later})
    assert reply.status_code == 200, reply.json
    latest = client.get(f"/api/v2/workspaces/{setup['workspace']['id']}", headers=personas["carol"].auth).json
    assert datetime.fromisoformat(latest["latest_build"]["deadline"]) == datetime.fromisoformat(later)
    too_soon = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    assert put(client, personas["carol"], path, {"deadline": too_soon}).status_code == 400


def test_quiet_hours(client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]) -> None:
    carol = personas["carol"]
    assert client.get("/api/v2/users/me/quiet-hours", headers=carol.auth).json == {"schedule": "CRON_TZ=UTC 0 0 * * *"}
    reply = put(client, carol, "/users/me/quiet-hours", {"schedule": "CRON_TZ=America/New_York 0 22 * * *"})
    assert reply.status_code == 200 and reply.json["schedule"] == "CRON_TZ=America/New_York 0 22 * * *"
    bad = put(client, carol, "/users/me/quiet-hours", {"schedule": "CRON_TZ=UTC 0 22 * * 1-5"})
    assert bad.status_code == 400 and bad.json["validations"][0]["field"] == "schedule"
    # Someone else's quiet hours are theirs.
    assert (
        client.get("/api/v2/users/me/quiet-hours", headers=personas["dave"].auth)
        .json["schedule"]
        .startswith("CRON_TZ=UTC")
    )


def test_admins_see_what_goes_dormant_and_is_deleted_next(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    path = "/api/v2/workspaces/lifecycle-upcoming"
    assert client.get(path, headers=personas["carol"].auth).status_code == 403
    assert client.get(path, headers=personas["bob"].auth).json == {"dormant_next": [], "deleted_next": []}
    client.patch(
        f"/api/v2/templates/{setup['template']['id']}",
        json={"time_til_dormant_ms": 7 * 24 * 3_600_000, "time_til_dormant_autodelete_ms": 24 * 3_600_000},
        headers=personas["bob"].auth,
    )
    upcoming = client.get(path, headers=personas["alice"].auth).json
    assert [row["name"] for row in upcoming["dormant_next"]] == ["ws"] and upcoming["deleted_next"] == []
    dormant_at = datetime.fromisoformat(upcoming["dormant_next"][0]["dormant_at"])
    assert timedelta(days=6, hours=23) < dormant_at - datetime.now(UTC) <= timedelta(days=7)
    put(client, personas["bob"], f"/workspaces/{setup['workspace']['id']}/dormant", {"dormant": True})
    upcoming = client.get(path, headers=personas["bob"].auth).json
    assert upcoming["dormant_next"] == [] and [row["name"] for row in upcoming["deleted_next"]] == ["ws"]


def test_a_workspace_is_created_with_its_schedule_or_not_at_all(
    client: FlaskClient, personas: dict[str, Persona], setup: dict[str, Any]
) -> None:
    base = {"template_id": setup["template"]["id"], "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    body = {
        **base, "name": "scheduled", "autostart_schedule": "CRON_TZ=Asia/Tokyo 0 8 * * 1-5", "ttl_ms": 7_200_000,
        "automatic_updates": "always",
    }  # fmt: skip
    made = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
    assert made.status_code == 201, made.json
    assert made.json["autostart_schedule"] == "CRON_TZ=Asia/Tokyo 0 8 * * 1-5" and made.json["next_start_at"]
    assert made.json["ttl_ms"] == 7_200_000 and made.json["automatic_updates"] == "always"
    bad = client.post(
        "/api/v2/workspaces", json={**base, "name": "bad", "autostart_schedule": "CRON_TZ=Nowhere 0 8 * * *"},
        headers=personas["carol"].auth,
    )  # fmt: skip
    assert bad.status_code == 400 and bad.json["validations"][0]["field"] == "autostart_schedule"
    names = [item["name"] for item in client.get("/api/v2/workspaces", headers=personas["carol"].auth).json]
    assert "bad" not in names
