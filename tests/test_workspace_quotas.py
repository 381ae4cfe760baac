"""Workspace quotas, as Coder's: a person's budget is the sum of their groups' allowances (Everyone included), what
they use is the daily_cost of their workspaces' resources (all of a started one, the persistent ones of a stopped
one), quotas are on once any group sets an allowance, and ``GET /api/v2/workspace-quota/{user}`` answers Coder's
``{credits_consumed, budget}`` to the person, owners, user admins and auditors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from app.core.extensions import db
from app.users.models import PREBUILDS_USER_ID, User
from app.workspaces import quotas, services
from app.workspaces.models import Workspace
from tests.conftest import PASSWORD, Persona
from tests.support.web import sign_in
from tests.test_workspace_updates import World

pytestmark = pytest.mark.databases("sqlite", "postgresql")

GROUPS = "/api/v2/organizations/default/groups"
VALUES = [{"name": "region", "value": "eu"}, {"name": "size", "value": "6"}]


def costly(home: int, dev: int) -> dict[str, list[dict[str, Any]]]:
    """What a daemon reports for a start (a home volume and a container) and a stop (the volume alone)."""
    volume = {"name": "home", "type": "terraform_data", "lifecycle": "persistent", "daily_cost": home, "agents": []}
    container = {"name": "dev", "type": "terraform_data", "lifecycle": "ephemeral", "daily_cost": dev, "agents": []}
    return {"start": [volume, container], "stop": [volume]}


class Quotas(World):
    def build(self, workspace_id: str, transition: str, resources: dict[str, list[dict[str, Any]]]) -> None:
        path = f"/api/v2/workspaces/{workspace_id}/builds"
        reply = self.client.post(path, json={"transition": transition}, headers=self.personas["carol"].auth)
        assert reply.status_code == 201, reply.json
        self.complete(reply.json, resources[transition])

    def complete(self, build: dict[str, Any], resources: list[dict[str, Any]]) -> None:
        job_id = build["job"]["id"]
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        done = {"workspace_build": {"resources": resources}}
        assert self.daemon.call(f"/jobs/{job_id}/complete", done).status_code == 204

    def make(self, name: str, resources: dict[str, list[dict[str, Any]]]) -> str:
        body = {"template_id": self.template["id"], "name": name, "rich_parameter_values": VALUES}
        reply = self.client.post("/api/v2/workspaces", json=body, headers=self.personas["carol"].auth)
        assert reply.status_code == 201, reply.json
        self.complete(reply.json["latest_build"], resources["start"])
        return str(reply.json["id"])

    def quota(self, user: str, who: str) -> Any:
        return self.client.get(f"/api/v2/workspace-quota/{user}", headers=self.personas[who].auth)

    def allow(self, group_id: str, allowance: int, members: list[str] | None = None) -> None:
        body: dict[str, Any] = {"quota_allowance": allowance}
        if members:
            body["add_users"] = [self.personas[name].id for name in members]
        reply = self.client.patch(f"/api/v2/groups/{group_id}", json=body, headers=self.personas["alice"].auth)
        assert reply.status_code == 200, reply.json


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> Quotas:
    return Quotas(client, personas)


def test_use_counts_started_workspaces_whole_and_stopped_ones_by_their_persistent_resources(
    app: Flask, world: Quotas
) -> None:
    big = world.make("big", costly(home=2, dev=5))
    world.make("small", costly(home=1, dev=0))
    assert world.quota("me", "carol").json == {"credits_consumed": 8, "budget": 0}
    world.build(big, "stop", costly(home=2, dev=5))
    assert world.quota("me", "carol").json == {"credits_consumed": 3, "budget": 0}
    world.build(big, "start", costly(home=2, dev=5))
    assert world.quota("carol", "carol").json["credits_consumed"] == 8
    # Deleted workspaces cost nothing; other people's are not carol's.
    path = f"/api/v2/workspaces/{big}/builds"
    deleting = world.client.post(
        path, json={"transition": "delete", "confirm_name": "big"}, headers=world.personas["carol"].auth
    )
    assert deleting.status_code == 201, deleting.json
    world.complete(deleting.json, [])
    assert world.quota("me", "carol").json["credits_consumed"] == 1
    assert world.quota("me", "dave").json == {"credits_consumed": 0, "budget": 0}
    with app.app_context():
        carol = db.session.get(User, world.personas["carol"].id)
        assert carol is not None
        quota = quotas.quota_of(carol)
        assert [(item.name, item.daily_cost) for item in quota.workspaces] == [("small", 1)]


def test_the_budget_sums_every_group_of_the_person_everyone_included_and_turns_quotas_on(
    app: Flask, world: Quotas
) -> None:
    everyone = world.client.get(GROUPS, headers=world.personas["alice"].auth).json[0]
    assert everyone["name"] == "Everyone"
    created = world.client.post(GROUPS, json={"name": "ml"}, headers=world.personas["alice"].auth)
    assert created.status_code == 201, created.json
    ws = world.make("big", costly(home=2, dev=5))
    with app.app_context():
        carol = db.session.get(User, world.personas["carol"].id)
        assert carol is not None
        # No allowance anywhere: quotas are off, and nothing is refused whatever it costs.
        assert quotas.quota_of(carol).enabled is False and quotas.over_budget(carol, ws, 1000) is None
    world.allow(everyone["id"], 3)
    world.allow(created.json["id"], 10, members=["carol"])
    assert world.quota("me", "carol").json == {"credits_consumed": 7, "budget": 13}
    assert world.quota("me", "dave").json == {"credits_consumed": 0, "budget": 3}
    with app.app_context():
        carol = db.session.get(User, world.personas["carol"].id)
        assert carol is not None
        assert quotas.quota_of(carol).enabled is True
        # The build's own workspace's cost is replaced, not added: 7 -> 13 fits, 7 -> 14 does not.
        assert quotas.over_budget(carol, ws, 13) is None
        assert quotas.over_budget(carol, ws, 14) == (
            "This build of big would cost 14 a day and take carol over their quota: budget 13, in use 7 "
            "(workspaces: big 7). Stop or delete a workspace, or ask an admin for a larger allowance."
        )
        # A build that costs no more than the workspace does now always passes, even over budget.
        assert quotas.over_budget(carol, ws, 7) is None


def test_only_the_person_owners_user_admins_and_auditors_read_a_quota(world: Quotas) -> None:
    carol = world.personas["carol"]
    assert world.quota(carol.id, "carol").status_code == 200
    refused = world.quota("carol", "dave")
    assert refused.status_code == 403 and "auditors" in refused.json["message"]
    assert world.quota("carol", "bob").status_code == 403  # template admins manage templates, not people
    assert world.quota("carol", "alice").json == {"credits_consumed": 0, "budget": 0}
    assert world.quota("nobody", "alice").status_code == 404


def test_the_workspaces_page_shows_use_and_budget_and_the_users_page_everyones_once_quotas_are_on(
    app: Flask, world: Quotas
) -> None:
    world.make("big", costly(home=2, dev=5))
    carol, alice = app.test_client(), app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    sign_in(alice, "alice@example.com", PASSWORD)
    assert 'id="workspace-quota"' not in carol.get("/workspaces").get_data(as_text=True)  # quotas off
    assert "user-quota" not in alice.get("/users").get_data(as_text=True)
    everyone = world.client.get(GROUPS, headers=world.personas["alice"].auth).json[0]
    world.allow(everyone["id"], 4)
    page = carol.get("/workspaces").get_data(as_text=True)
    assert (
        "Quota: your workspaces cost <strong>7</strong> of your budget of <strong>4</strong> credits a day (big 7)."
        in page
    )
    users = alice.get("/users").get_data(as_text=True)
    row = users[users.index(f'id="user-{world.personas["carol"].id}"') :]
    assert re.search(r'class="small user-quota field-error">7 / 4</td>', row[: row.index("</tr>")])
    dave = users[users.index(f'id="user-{world.personas["dave"].id}"') :]
    assert re.search(r'class="small user-quota">0 / 4</td>', dave[: dave.index("</tr>")])


def test_the_daemons_check_counts_builds_still_applying_and_asks_only_for_starts_under_quotas(world: Quotas) -> None:
    """Two starts by one person at once: the first's accepted cost counts while it applies, so the second is refused
    (the check between plan and apply, as the daemon calls it); stops are never asked about."""
    everyone = world.client.get(GROUPS, headers=world.personas["alice"].auth).json[0]
    first, second = world.make("one", costly(0, 0)), world.make("two", costly(0, 0))
    world.build(first, "stop", costly(0, 0))
    world.build(second, "stop", costly(0, 0))
    world.allow(everyone["id"], 10)
    jobs = []
    for workspace_id in (first, second):
        path = f"/api/v2/workspaces/{workspace_id}/builds"
        reply = world.client.post(path, json={"transition": "start"}, headers=world.personas["carol"].auth)
        assert reply.status_code == 201, reply.json
        job_id = reply.json["job"]["id"]
        acquired = world.daemon.call(f"/jobs/{job_id}/acquire")
        assert acquired.json["workspace_build"]["commit_quota"] is True
        jobs.append(job_id)
    assert world.daemon.call(f"/jobs/{jobs[0]}/quota", {"daily_cost": 8}).json == {"ok": True, "message": ""}
    assert world.quota("me", "carol").json == {"credits_consumed": 8, "budget": 10}
    refused = world.daemon.call(f"/jobs/{jobs[1]}/quota", {"daily_cost": 8}).json
    assert refused["ok"] is False
    assert refused["message"].startswith("This build of two would cost 8 a day and take carol over their quota: ")
    assert "budget 10, in use 8 (workspaces: one 8)" in refused["message"]
    bad = world.daemon.call(f"/jobs/{jobs[1]}/quota", {"daily_cost": -1})
    assert bad.status_code == 400
    # Once the first ends, its recorded resources count instead of what was accepted.
    done = {"workspace_build": {"resources": costly(home=1, dev=2)["start"]}}
    assert world.daemon.call(f"/jobs/{jobs[0]}/complete", done).status_code == 204
    assert world.quota("me", "carol").json == {"credits_consumed": 3, "budget": 10}
    stop = world.client.post(
        f"/api/v2/workspaces/{first}/builds", json={"transition": "stop"}, headers=world.personas["carol"].auth
    )
    acquired = world.daemon.call(f"/jobs/{stop.json['job']['id']}/acquire")
    assert acquired.json["workspace_build"]["commit_quota"] is False


def prebuilds_user() -> User:
    return db.session.get_one(User, PREBUILDS_USER_ID)


def test_prebuilds_answer_to_their_templates_prebuild_budget_not_to_a_persons_quota(app: Flask, world: Quotas) -> None:
    # Two workspaces built, then handed to the prebuilds system user (who cannot sign in: the reconciler acts as it
    # in process); an owner rebuilds them here as the reconciler would.
    made = [world.make(name, costly(home=1, dev=2)) for name in ("p1", "p2")]
    with app.app_context():
        db.session.execute(update(Workspace).where(Workspace.id.in_(made)).values(owner_id=PREBUILDS_USER_ID))
        db.session.commit()
    world.personas["prebuilds"] = world.personas["alice"]
    assert world.quota("prebuilds", "alice").json == {"credits_consumed": 0, "budget": 0}  # nobody's quota
    path = f"/api/v2/templates/{world.template['id']}"
    assert world.client.patch(path, json={"prebuild_budget": 5}, headers=world.personas["bob"].auth).status_code == 200
    builds = f"/api/v2/workspaces/{made[1]}/builds"
    stop = world.client.post(builds, json={"transition": "stop"}, headers=world.personas["prebuilds"].auth)
    world.complete(stop.json, costly(home=1, dev=2)["stop"])
    with app.app_context():  # as the reconciler starts one: no person's access to check
        prebuild = db.session.get_one(Workspace, made[1])
        job = services.queue_build(prebuilds_user(), prebuild, "start", {}, reason="autostart")
        db.session.commit()
        start = {"job": {"id": job.id}}
    acquired = world.daemon.call(f"/jobs/{start['job']['id']}/acquire")
    assert acquired.json["workspace_build"]["commit_quota"] is True  # though no group sets an allowance
    refused = world.daemon.call(f"/jobs/{start['job']['id']}/quota", {"daily_cost": 3}).json
    assert refused == {
        "ok": False,
        "message": f"This prebuild would cost 3 a day and take the prebuilds of template {world.template['name']} "
        "over their budget: prebuild_budget 5, in use 3 (workspaces: p1 3).",
    }
    assert world.daemon.call(f"/jobs/{start['job']['id']}/quota", {"daily_cost": 2}).json["ok"] is True
