"""Every lifecycle rule a template sets, through every path that can touch it: the JSON API (which the CLI's
`create`, `start`, `schedule start|stop|extend` call as they are), the dashboard's forms and the lifecycle executor.
Each row is one attempt by carol (a member) to get around one rule; it runs with the rule on (the attempt must
not go through) and with the rule off (the same attempt goes through: the row can tell the two apart).

Rules: ``require_active_version`` (a member builds only the active version), ``allow_user_autostop`` off (the
template's TTL, nobody else's, decides when a workspace stops), ``autostop_requirement`` (no deadline moves past
the forced stop in the owner's quiet hours), ``allow_user_autostart`` off (no schedule of the owner's starts a
workspace). Dormancy and the failure TTL are the executor's alone: no path of a member's sets them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.lifecycle.activity import flush_activity, mark_used
from app.lifecycle.executor import run_tick
from app.workspaces.models import Workspace
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import PARAMETERS
from tests.support.web import post_form, sign_in
from tests.test_workspace_updates import World

pytestmark = pytest.mark.databases("sqlite")

HOUR_MS = 3_600_000
REGION = [{"name": "region", "value": "eu"}]
SCHEDULE = "CRON_TZ=UTC 0 9 * * *"


class Policies(World):
    """carol's workspace ``ws`` runs v1; v2 is the template's active version; v3 was pushed but never promoted."""

    def __init__(self, app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
        super().__init__(client, personas)
        self.app = app
        self.template_patch({"default_ttl_ms": HOUR_MS})
        self.ws = self.create()["id"]
        self.v2 = self.push([PARAMETERS[0], PARAMETERS[1]])
        self.promote(self.v2)
        self.v3 = self.push([PARAMETERS[0], PARAMETERS[1]])
        self.pages = app.test_client()
        sign_in(self.pages, "carol@example.com", PASSWORD)

    def template_patch(self, body: dict[str, Any]) -> None:
        path = f"/api/v2/templates/{self.template['id']}"
        reply = self.client.patch(path, json=body, headers=self.personas["bob"].auth)
        assert reply.status_code == 200, reply.json

    def api(self, method: str, path: str, body: dict[str, Any]) -> Any:
        return self.client.open(f"/api/v2{path}", method=method, json=body, headers=self.personas["carol"].auth)

    def form(self, path: str, data: dict[str, str]) -> None:
        reply = post_form(self.pages, path, data, token_from=f"/workspaces/{self.ws}")
        # A form the template's rules refuse is the page again with the refusal (403), never a 500.
        assert reply.status_code in (302, 403), reply.get_data(as_text=True)

    def workspace(self) -> dict[str, Any]:
        return self.get(self.ws)

    def deadline(self) -> datetime | None:
        text = self.workspace()["latest_build"]["deadline"]
        return datetime.fromisoformat(text) if text else None

    def stopped(self) -> None:
        self.stop(self.ws)

    def set_row(self, **values: Any) -> None:
        with self.app.app_context():
            workspace = db.session.get(Workspace, self.ws)
            assert workspace is not None
            for name, value in values.items():
                setattr(workspace, name, value)
            db.session.commit()
            db.session.remove()

    def autostart_tick(self) -> list[tuple[str, str]]:
        """The executor at the minute the workspace's schedule (set while the template allowed it) comes due."""
        due = datetime.now(UTC).replace(second=0, microsecond=0)
        self.set_row(autostart_schedule=SCHEDULE, next_start_at=due)
        with self.app.app_context():
            try:
                return run_tick(due + timedelta(minutes=1)).queued
            finally:
                db.session.remove()

    def latest_version(self) -> str:
        return str(self.workspace()["latest_build"]["template_version_id"])


# --- require_active_version: True when carol got a version other than the active one built ----------------------


def create_naming_an_old_version(world: Policies) -> bool:
    body = {"template_id": world.template["id"], "name": "old", "rich_parameter_values": REGION}
    reply = world.api("POST", "/workspaces", {**body, "template_version_id": world.v1})
    return bool(reply.status_code == 201 and reply.json["latest_build"]["template_version_id"] == world.v1)


def start_naming_an_old_version(world: Policies) -> bool:
    world.stopped()
    reply = world.start(world.ws, template_version_id=world.v1)
    return bool(reply.status_code == 201 and reply.json["template_version_id"] == world.v1)


def stop_naming_a_version_not_running_nor_active(world: Policies) -> bool:
    reply = world.api("POST", f"/workspaces/{world.ws}/builds", {"transition": "stop", "template_version_id": world.v3})
    return bool(reply.status_code == 201 and reply.json["template_version_id"] == world.v3)


def start_button_on_the_workspace_page(world: Policies) -> bool:
    world.stopped()
    world.form(f"/workspaces/{world.ws}/builds", {"transition": "start"})
    return world.latest_version() == world.v1


def parameters_form(world: Policies) -> bool:
    world.stopped()
    path = f"/workspaces/{world.ws}/parameters"
    reply = post_form(world.pages, path, {"param:size": "2"})
    assert reply.status_code == 302, reply.get_data(as_text=True)
    return world.latest_version() == world.v1


def executor_autostart(world: Policies) -> bool:
    world.stopped()
    assert world.autostart_tick() != []
    return world.latest_version() == world.v1


# --- allow_user_autostop off: True when carol moved or set her own autostop --------------------------------------


def ttl_by_api(world: Policies) -> bool:
    reply = world.api("PUT", f"/workspaces/{world.ws}/ttl", {"ttl_ms": 5 * HOUR_MS})
    return bool(reply.status_code == 204 and world.workspace()["ttl_ms"] == 5 * HOUR_MS)


def extend_by_api_far_away(world: Policies) -> bool:
    # The finding's request: with no max_deadline, a deadline in year 9999 was accepted (now: 403, and 400 for
    # anything past the longest TTL even where people may set their autostop).
    reply = world.api("PUT", f"/workspaces/{world.ws}/extend", {"deadline": "9999-12-31T00:00:00Z"})
    assert reply.status_code in (400, 403), reply.json
    later = (datetime.now(UTC) + timedelta(hours=5)).replace(microsecond=0)
    reply = world.api("PUT", f"/workspaces/{world.ws}/extend", {"deadline": later.isoformat()})
    return bool(reply.status_code == 200 and world.deadline() == later)


def create_with_a_ttl(world: Policies) -> bool:
    body = {"template_id": world.template["id"], "name": "mine", "rich_parameter_values": REGION}
    reply = world.api("POST", "/workspaces", {**body, "ttl_ms": 5 * HOUR_MS})
    return bool(reply.status_code == 201 and reply.json["ttl_ms"] == 5 * HOUR_MS)


def schedule_form_ttl(world: Policies) -> bool:
    world.form(f"/workspaces/{world.ws}/schedule", {"ttl_hours": "5"})
    return bool(world.workspace()["ttl_ms"] == 5 * HOUR_MS)


def extend_form(world: Policies) -> bool:
    before = world.deadline()
    world.form(f"/workspaces/{world.ws}/extend", {"hours": "4"})
    return world.deadline() != before


def start_deadline_from_an_earlier_ttl(world: Policies) -> bool:
    """A TTL carol set while she could, and any start afterwards (hers, or the executor's autostart)."""
    world.set_row(ttl_ms=5 * HOUR_MS)
    world.stopped()
    started = world.start(world.ws)
    assert started.status_code == 201, started.json
    world.finish(started.json)
    deadline = world.deadline()
    assert deadline is not None
    return deadline > datetime.now(UTC) + timedelta(hours=2)


# --- autostop_requirement (every day): True when a deadline got past the forced stop in carol's quiet hours --------
# The forced stop (max_deadline) is the next midnight UTC at least an hour after a start: within 25 hours.


def restarted(world: Policies) -> None:
    """A start completed under the template's current rules (its max_deadline is fixed when it completes)."""
    world.stopped()
    started = world.start(world.ws)
    assert started.status_code == 201, started.json
    world.finish(started.json)


def extend_past_the_requirement(world: Policies) -> bool:
    restarted(world)
    later = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    reply = world.api("PUT", f"/workspaces/{world.ws}/extend", {"deadline": later.isoformat()})
    return bool(reply.status_code == 200 and world.deadline() == later)


def long_ttl_past_the_requirement(world: Policies) -> bool:
    world.set_row(ttl_ms=29 * 24 * HOUR_MS)
    restarted(world)
    deadline = world.deadline()
    return deadline is not None and deadline > datetime.now(UTC) + timedelta(days=2)


def activity_bump_past_the_requirement(world: Policies) -> bool:
    """An open connection (SSH, a tunnel) pushes the autostop out by the template's activity bump."""
    world.template_patch({"activity_bump_ms": 10 * 24 * HOUR_MS})
    restarted(world)
    with world.app.app_context():
        mark_used(world.ws, connection=True)
        assert flush_activity(world.app.config["SLIPWAY_SETTINGS"]) == 1
        db.session.remove()
    deadline = world.deadline()
    return deadline is not None and deadline > datetime.now(UTC) + timedelta(days=2)


# --- allow_user_autostart off: True when a schedule of carol's was set or started her workspace ------------------


def autostart_by_api(world: Policies) -> bool:
    reply = world.api("PUT", f"/workspaces/{world.ws}/autostart", {"schedule": SCHEDULE})
    return bool(reply.status_code == 204 and world.workspace()["autostart_schedule"] == SCHEDULE)


def create_with_a_schedule(world: Policies) -> bool:
    body = {"template_id": world.template["id"], "name": "mine", "rich_parameter_values": REGION}
    reply = world.api("POST", "/workspaces", {**body, "autostart_schedule": SCHEDULE})
    return bool(reply.status_code == 201 and reply.json["autostart_schedule"] == SCHEDULE)


def schedule_form_autostart(world: Policies) -> bool:
    form = {"start_time": "09:00", "day": "mon", "zone": "UTC", "ttl_hours": ""}
    world.form(f"/workspaces/{world.ws}/schedule", form)
    return bool(world.workspace()["autostart_schedule"])


def executor_autostart_of_an_earlier_schedule(world: Policies) -> bool:
    world.stopped()
    return world.autostart_tick() != []


@dataclass(frozen=True)
class Rule:
    name: str
    on: dict[str, bool]
    off: dict[str, bool]


REQUIRE_ACTIVE = Rule("require_active_version", {"require_active_version": True}, {"require_active_version": False})
NO_USER_AUTOSTOP = Rule("allow_user_autostop=false", {"allow_user_autostop": False}, {"allow_user_autostop": True})
EVERY_DAY = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
DAILY_STOP = Rule(
    "autostop_requirement",
    {"autostop_requirement": {"days_of_week": EVERY_DAY, "weeks": 1}},
    {"autostop_requirement": {"days_of_week": [], "weeks": 1}},
)
NO_USER_AUTOSTART = Rule("allow_user_autostart=false", {"allow_user_autostart": False}, {"allow_user_autostart": True})

TABLE: list[tuple[Rule, str, Callable[[Policies], bool]]] = [
    (REQUIRE_ACTIVE, "API create", create_naming_an_old_version),
    (REQUIRE_ACTIVE, "API start", start_naming_an_old_version),
    (REQUIRE_ACTIVE, "API stop", stop_naming_a_version_not_running_nor_active),
    (REQUIRE_ACTIVE, "form start", start_button_on_the_workspace_page),
    (REQUIRE_ACTIVE, "form parameters", parameters_form),
    (REQUIRE_ACTIVE, "executor autostart", executor_autostart),
    (NO_USER_AUTOSTOP, "API ttl", ttl_by_api),
    (NO_USER_AUTOSTOP, "API extend", extend_by_api_far_away),
    (NO_USER_AUTOSTOP, "API create", create_with_a_ttl),
    (NO_USER_AUTOSTOP, "form schedule", schedule_form_ttl),
    (NO_USER_AUTOSTOP, "form extend", extend_form),
    (NO_USER_AUTOSTOP, "start deadline", start_deadline_from_an_earlier_ttl),
    (DAILY_STOP, "API extend", extend_past_the_requirement),
    (DAILY_STOP, "start deadline", long_ttl_past_the_requirement),
    (DAILY_STOP, "activity bump", activity_bump_past_the_requirement),
    (NO_USER_AUTOSTART, "API autostart", autostart_by_api),
    (NO_USER_AUTOSTART, "API create", create_with_a_schedule),
    (NO_USER_AUTOSTART, "form schedule", schedule_form_autostart),
    (NO_USER_AUTOSTART, "executor autostart", executor_autostart_of_an_earlier_schedule),
]


@pytest.mark.parametrize("rule_on", [True, False], ids=["rule-on", "rule-off"])
@pytest.mark.parametrize(
    ("rule", "path", "attempt"), TABLE, ids=[f"{rule.name}-{path}".replace(" ", "-") for rule, path, _ in TABLE]
)
def test_a_template_rule_holds_on_every_path(
    app: Flask,
    client: FlaskClient,
    personas: dict[str, Persona],
    rule: Rule,
    path: str,
    attempt: Callable[[Policies], bool],
    rule_on: bool,
) -> None:
    world = Policies(app, client, personas)
    world.template_patch(rule.on if rule_on else rule.off)
    went_through = attempt(world)
    assert went_through is not rule_on, f"{rule.name} via {path}: went through={went_through}, rule on={rule_on}"


def test_template_admins_may_still_build_an_older_version(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    world = Policies(app, client, personas)
    world.template_patch(REQUIRE_ACTIVE.on)
    body = {"template_id": world.template["id"], "name": "old", "rich_parameter_values": REGION}
    reply = client.post(
        "/api/v2/workspaces", json={**body, "template_version_id": world.v1}, headers=world.personas["bob"].auth
    )
    assert reply.status_code == 201 and reply.json["latest_build"]["template_version_id"] == world.v1
    refused = world.api("POST", "/workspaces", {**body, "template_version_id": world.v1})
    assert refused.status_code == 403 and "active version" in refused.json["message"]
