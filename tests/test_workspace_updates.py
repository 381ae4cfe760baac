"""Outdated workspaces and updates: a promoted version makes workspaces outdated; an update is a start on the
active version whose parameters are checked by the server first (a 400 naming each one, never a build that fails
on the daemon); the template's policy and the workspace's automatic updates choose the version a start builds."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import Persona
from tests.support.archives import tar_of
from tests.support.daemon import PARAMETERS, RESOURCES, FakeDaemon, import_template

pytestmark = pytest.mark.databases("sqlite", "postgresql")

# v2 drops the "eu" option of region, tightens size to at most 4, and adds a required "zone".
PARAMETERS_V2 = [
    {**PARAMETERS[0], "validation_max": 4},
    {**PARAMETERS[1], "options": [{"name": "US", "value": "us"}]},
    {"name": "zone", "type": "string", "mutable": True, "required": True, "default_value": "", "options": []},
]


class World:
    def __init__(self, client: FlaskClient, personas: dict[str, Persona]) -> None:
        self.client, self.personas = client, personas
        self.daemon = FakeDaemon(client)
        self.template = import_template(client, personas, self.daemon)
        self.v1 = self.template["active_version_id"]

    def push(self, parameters: list[dict[str, Any]]) -> str:
        bob = self.personas["bob"]
        archive = tar_of({"main.tf": 'resource "terraform_data" "v2" {}\n'})
        headers = {**bob.auth, "Content-Type": "application/x-tar"}
        file_id = self.client.post("/api/v2/files", data=archive, headers=headers).json["id"]
        body = {"file_id": file_id, "template_id": self.template["id"]}
        version = self.client.post("/api/v2/templateversions", json=body, headers=bob.auth).json
        job_id = version["job"]["id"]
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        done = {"template_import": {"parameters": parameters, "resources": RESOURCES}}
        assert self.daemon.call(f"/jobs/{job_id}/complete", done).status_code == 204
        return str(version["id"])

    def promote(self, version_id: str) -> None:
        path = f"/api/v2/templates/{self.template['id']}/versions"
        assert self.client.patch(path, json={"id": version_id}, headers=self.personas["bob"].auth).status_code == 200

    def finish(self, build: dict[str, Any]) -> None:
        job_id = build["job"]["id"]
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        assert self.daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204

    def create(self, who: str = "carol", name: str = "ws") -> dict[str, Any]:
        body = {
            "template_id": self.template["id"], "name": name,
            "rich_parameter_values": [{"name": "region", "value": "eu"}, {"name": "size", "value": "6"}],
        }  # fmt: skip
        reply = self.client.post("/api/v2/workspaces", json=body, headers=self.personas[who].auth)
        assert reply.status_code == 201, reply.json
        self.finish(reply.json["latest_build"])
        return dict(reply.json)

    def get(self, workspace_id: str, who: str = "carol") -> dict[str, Any]:
        return dict(self.client.get(f"/api/v2/workspaces/{workspace_id}", headers=self.personas[who].auth).json)

    def start(self, workspace_id: str, who: str = "carol", **body: Any) -> Any:
        path = f"/api/v2/workspaces/{workspace_id}/builds"
        return self.client.post(path, json={"transition": "start", **body}, headers=self.personas[who].auth)

    def stop(self, workspace_id: str, who: str = "carol") -> None:
        path = f"/api/v2/workspaces/{workspace_id}/builds"
        reply = self.client.post(path, json={"transition": "stop"}, headers=self.personas[who].auth)
        assert reply.status_code == 201, reply.json
        self.finish(reply.json)


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> World:
    return World(client, personas)


def test_an_update_names_every_parameter_the_new_version_needs_before_building(world: World) -> None:
    workspace = world.create()
    assert world.get(workspace["id"])["outdated"] is False
    v2 = world.push(PARAMETERS_V2)
    # Before promoting, the admin sees what it would do; members may not look.
    check_path = f"/api/v2/templateversions/{v2}/promotion-check"
    assert world.client.get(check_path, headers=world.personas["carol"].auth).status_code == 403
    check = world.client.get(check_path, headers=world.personas["bob"].auth).json
    assert check["outdated_count"] == 1
    assert check["workspaces"][0]["needs_parameters"] == ["region", "size", "zone"]
    world.promote(v2)
    seen = world.get(workspace["id"])
    assert seen["outdated"] is True and seen["template_active_version_id"] == v2
    world.stop(workspace["id"])
    refused = world.start(workspace["id"], template_version_id=v2)
    assert refused.status_code == 400
    assert sorted(item["field"] for item in refused.json["validations"]) == ["region", "size", "zone"]
    assert world.get(workspace["id"])["latest_build"]["transition"] == "stop"  # nothing was queued
    values = [{"name": "region", "value": "us"}, {"name": "zone", "value": "b"}, {"name": "size", "value": "6"}]
    # size is monotonic increasing and now at most 4: 6 no longer passes, and it may not go down either.
    again = world.start(workspace["id"], template_version_id=v2, rich_parameter_values=values)
    assert again.status_code == 400 and [item["field"] for item in again.json["validations"]] == ["size"]


def test_a_valid_update_builds_the_active_version(world: World) -> None:
    workspace = world.create()
    v2 = world.push([PARAMETERS[0], PARAMETERS[1], {**PARAMETERS_V2[2], "required": False, "default_value": "a"}])
    world.promote(v2)
    world.stop(workspace["id"])
    reply = world.start(workspace["id"], template_version_id=v2)
    assert reply.status_code == 201, reply.json
    assert reply.json["template_version_id"] == v2
    world.finish(reply.json)
    assert world.get(workspace["id"])["outdated"] is False


def test_require_active_version_holds_members_to_the_active_version_not_admins(world: World) -> None:
    member = world.create("carol", "mine")
    admin = world.create("bob", "bobs")
    v2 = world.push([PARAMETERS[0], PARAMETERS[1]])
    world.promote(v2)
    path = f"/api/v2/templates/{world.template['id']}"
    assert (
        world.client.patch(path, json={"require_active_version": True}, headers=world.personas["bob"].auth).status_code
        == 200
    )
    world.stop(member["id"])
    world.stop(admin["id"], "bob")
    refused = world.start(member["id"], template_version_id=world.v1)
    assert refused.status_code == 403 and "active version" in refused.json["message"]
    # A plain start by the member builds the active version.
    started = world.start(member["id"])
    assert started.status_code == 201 and started.json["template_version_id"] == v2
    kept = world.start(admin["id"], "bob")
    assert kept.status_code == 201 and kept.json["template_version_id"] == world.v1


def test_automatic_updates_make_every_start_build_the_active_version(world: World) -> None:
    workspace = world.create()
    path = f"/api/v2/workspaces/{workspace['id']}/autoupdates"
    carol = world.personas["carol"]
    assert world.client.put(path, json={"automatic_updates": "always"}, headers=carol.auth).status_code == 204
    v2 = world.push([PARAMETERS[0], PARAMETERS[1]])
    world.promote(v2)
    world.stop(workspace["id"])
    # The stop kept the version the workspace runs; the start moves it.
    assert world.get(workspace["id"])["latest_build"]["template_version_id"] == world.v1
    started = world.start(workspace["id"])
    assert started.status_code == 201 and started.json["template_version_id"] == v2
