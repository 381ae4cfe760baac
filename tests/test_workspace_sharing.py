"""Shared workspaces in-process, on SQLite and PostgreSQL: carol shares her workspace `w1` with dave (directly, or
through a group) to use or to administer; the API, the lists, every way in and the closing of open tunnels follow
the one rule (the real agent, SSH and apps run end to end in test_workspace_sharing_e2e.py)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from app.agents import tunnels
from app.core.extensions import db
from app.groups.models import Group, GroupMember
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from protocol.agentapi import CLOSE_ACCESS_REVOKED
from tests.conftest import PASSWORD, Persona, get_redis_of
from tests.support.web import post_form, sign_in
from tests.test_agent_api import UPGRADE, World

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.fixture
def world(app: Flask, personas: dict[str, Persona]) -> World:
    return World(app, personas)


def share(world: World, *, users: dict[str, str] | None = None, groups: dict[str, str] | None = None) -> Any:
    """carol's PATCH of w1's sharing list (user and group ids to roles)."""
    body = {"user_roles": users or {}, "group_roles": groups or {}}
    return world.api.patch(
        f"/api/v2/workspaces/{world.workspace['id']}/acl", json=body, headers=world.personas["carol"].auth
    )


def as_dave(world: World, method: str, path: str, **kwargs: Any) -> Any:
    return world.api.open(path, method=method, headers=world.personas["dave"].auth, **kwargs)


def test_a_use_share_lets_dave_see_enter_start_and_stop_but_not_administer(world: World) -> None:
    workspace_id, dave = world.workspace["id"], world.personas["dave"]
    assert as_dave(world, "GET", f"/api/v2/workspaces/{workspace_id}").status_code == 404
    assert as_dave(world, "GET", "/api/v2/workspaces").json == []
    assert share(world, users={dave.id: "use"}).status_code == 204

    listed = as_dave(world, "GET", "/api/v2/workspaces").json
    assert [(item["name"], item["owner_name"]) for item in listed] == [("w1", "carol")]
    assert as_dave(world, "GET", "/api/v2/workspaces?owner=me").json == []  # still carol's, not his
    agent_id = world.agent()["id"]
    tunnel = world.api.get(f"/api/v2/workspaceagents/{agent_id}/tunnel?service=ssh", headers={**UPGRADE, **dave.auth})
    assert tunnel.status_code == 409, tunnel.json  # past the guard: the agent has not connected
    acl = as_dave(world, "GET", f"/api/v2/workspaces/{workspace_id}/acl").json
    assert acl == {
        "users": [{"id": dave.id, "username": "dave", "name": "", "avatar_url": "", "role": "use"}],
        "group": [],
    }
    # Not his to administer: deleting, new parameter values, the schedule, the sharing list.
    builds = f"/api/v2/workspaces/{workspace_id}/builds"
    assert as_dave(world, "POST", builds, json={"transition": "delete"}).status_code == 403
    changed = {"transition": "start", "rich_parameter_values": [{"name": "size", "value": "2"}]}
    assert as_dave(world, "POST", builds, json=changed).status_code == 403
    ttl = f"/api/v2/workspaces/{workspace_id}/ttl"
    assert as_dave(world, "PUT", ttl, json={"ttl_ms": 3_600_000}).status_code == 403
    assert share_as(world, "dave", users={world.personas["bob"].id: "use"}).status_code == 403
    # But stop and start it as it is.
    stop = as_dave(world, "POST", builds, json={"transition": "stop"})
    assert stop.status_code == 201, stop.json
    assert stop.json["initiator_id"] == dave.id
    world.finish(stop.json["job"]["id"], [])
    start = as_dave(world, "POST", builds, json={"transition": "start"})
    assert start.status_code == 201, start.json


def share_as(world: World, persona: str, *, users: dict[str, str]) -> Any:
    return world.api.patch(
        f"/api/v2/workspaces/{world.workspace['id']}/acl",
        json={"user_roles": users},
        headers=world.personas[persona].auth,
    )


def test_an_admin_share_also_changes_schedule_and_parameters(world: World) -> None:
    workspace_id, dave = world.workspace["id"], world.personas["dave"]
    assert share(world, users={dave.id: "admin"}).status_code == 204
    ttl = f"/api/v2/workspaces/{workspace_id}/ttl"
    assert as_dave(world, "PUT", ttl, json={"ttl_ms": 3_600_000}).status_code == 204
    changed = {"transition": "start", "rich_parameter_values": [{"name": "size", "value": "2"}]}
    assert as_dave(world, "POST", f"/api/v2/workspaces/{workspace_id}/builds", json=changed).status_code == 201
    # Sharing stays its owner's: an admin share does not hand on more sharing.
    assert share_as(world, "dave", users={world.personas["bob"].id: "use"}).status_code == 403


def test_a_group_share_reaches_its_members_and_everyone_reaches_all(app: Flask, world: World) -> None:
    workspace_id, dave = world.workspace["id"], world.personas["dave"]
    with app.app_context():
        group = Group(organization_id=DEFAULT_ORGANIZATION_ID, name="pair")
        db.session.add(group)
        db.session.flush()
        db.session.add(GroupMember(group_id=group.id, user_id=dave.id))
        db.session.commit()
        group_id = group.id
    assert share(world, groups={group_id: "use"}).status_code == 204
    assert as_dave(world, "GET", f"/api/v2/workspaces/{workspace_id}").status_code == 200
    bob = world.personas["bob"]
    # bob, a template admin, sees every workspace but gets into none that is not shared with him.
    agent_id = world.agent()["id"]
    tunnel = f"/api/v2/workspaceagents/{agent_id}/tunnel?service=ssh"
    assert world.api.get(tunnel, headers={**UPGRADE, **bob.auth}).status_code == 403
    assert share(world, groups={group_id: "", DEFAULT_ORGANIZATION_ID: "use"}).status_code == 204
    assert world.api.get(tunnel, headers={**UPGRADE, **bob.auth}).status_code == 409
    assert as_dave(world, "GET", f"/api/v2/workspaces/{workspace_id}").status_code == 200
    acl = as_dave(world, "GET", f"/api/v2/workspaces/{workspace_id}/acl").json
    assert [(entry["name"], entry["role"]) for entry in acl["group"]] == [("Everyone", "use")]


def test_bad_entries_are_named_and_change_nothing(world: World) -> None:
    dave, carol = world.personas["dave"], world.personas["carol"]
    unknown = "00000000-0000-4000-8000-0000000000ff"
    reply = share(world, users={dave.id: "owner", unknown: "use", carol.id: "admin"}, groups={unknown: "use"})
    assert reply.status_code == 400
    fields = {item["field"]: item["detail"] for item in reply.json["validations"]}
    assert fields == {
        f"user_roles.{dave.id}": 'Use "use", "admin", or "" to remove.',
        f"user_roles.{unknown}": "No such person in the organisation.",
        f"user_roles.{carol.id}": "The workspace's owner needs no share.",
        f"group_roles.{unknown}": "No such group in the organisation.",
    }
    assert (
        world.api.patch(
            f"/api/v2/workspaces/{world.workspace['id']}/acl", json={"user_roles": ["x"]}, headers=carol.auth
        ).status_code
        == 400
    )
    assert as_dave(world, "GET", f"/api/v2/workspaces/{world.workspace['id']}").status_code == 404


def test_removing_a_share_closes_the_removed_persons_open_tunnels_only(app: Flask, world: World) -> None:
    workspace_id, dave, carol = world.workspace["id"], world.personas["dave"], world.personas["carol"]
    assert share(world, users={dave.id: "use"}).status_code == 204
    client = get_redis_of(app)
    daves = tunnels.TunnelHalf(client, "tunnel-dave", "user", tunnels.Holder(dave.id, workspace_id))
    carols = tunnels.TunnelHalf(client, "tunnel-carol", "user", tunnels.Holder(carol.id, workspace_id))
    for half in (daves, carols):
        half.beat()  # as an open tunnel does: listed under the workspace
    assert share(world, users={dave.id: "admin"}).status_code == 204  # a change that takes nothing away
    assert daves.pop(0.01) is None
    assert share(world, users={dave.id: ""}).status_code == 204
    closed = daves.pop(1)
    assert closed is not None and closed.kind == tunnels.CLOSE
    assert tunnels.parse_close(closed.payload) == (CLOSE_ACCESS_REVOKED, "Your access to this workspace was removed.")
    assert client.lpop(f"{tunnels.PREFIX}tunnel-dave:to-agent") is not None
    assert carols.pop(0.01) is None
    assert set(tunnels.open_tunnels(client, workspace_id)) == {"tunnel-carol"}
    for half in (daves, carols):
        half.cleanup()


def test_a_suspension_closes_the_persons_open_tunnels(app: Flask, world: World) -> None:
    workspace_id, dave = world.workspace["id"], world.personas["dave"]
    assert share(world, users={dave.id: "use"}).status_code == 204
    client = get_redis_of(app)
    daves = tunnels.TunnelHalf(client, "tunnel-suspended", "user", tunnels.Holder(dave.id, workspace_id))
    daves.beat()
    suspended = world.api.patch(
        f"/api/v2/users/{dave.id}", json={"status": "suspended"}, headers=world.personas["alice"].auth
    )
    assert suspended.status_code == 200, suspended.json
    closed = daves.pop(1)
    assert closed is not None and tunnels.parse_close(closed.payload)[0] == CLOSE_ACCESS_REVOKED
    daves.cleanup()


def test_the_sharing_card_shares_by_name_and_removes(app: Flask, world: World) -> None:
    owner = app.test_client()
    sign_in(owner, "carol@example.com", PASSWORD)
    page_path = f"/workspaces/{world.workspace['id']}"
    page = owner.get(page_path).get_data(as_text=True)
    assert 'id="sharing-form"' in page and '<option value="dave">' in page
    action = f"{page_path}/sharing"
    shared = post_form(owner, action, {"kind": "user", "name": "dave", "role": "use"}, token_from=page_path)
    assert shared.status_code == 302
    page = owner.get(page_path).get_data(as_text=True)
    assert "Shared with dave (use)." in page and "Stop sharing with dave" in page
    assert as_dave(world, "GET", f"/api/v2/workspaces/{world.workspace['id']}").status_code == 200
    refused = post_form(owner, action, {"kind": "group", "name": "nope", "role": "use"}, token_from=page_path)
    assert "No such group in the organisation." in owner.get(refused.headers["Location"]).get_data(as_text=True)
    post_form(owner, action, {"kind": "user", "name": "dave", "role": ""}, token_from=page_path)
    assert as_dave(world, "GET", f"/api/v2/workspaces/{world.workspace['id']}").status_code == 404
    # Those it is shared with see the list, not the form; nobody else may post it.
    assert share(world, users={world.personas["dave"].id: "admin"}).status_code == 204
    browser = app.test_client()
    sign_in(browser, "dave@example.com", PASSWORD)
    page = browser.get(page_path).get_data(as_text=True)
    assert "sharing-card" in page and 'id="sharing-form"' not in page
    assert (
        post_form(browser, action, {"kind": "user", "name": "bob", "role": "use"}, token_from=page_path).status_code
        == 403
    )


def test_the_workspace_page_offers_a_use_share_start_and_stop_only(app: Flask, world: World) -> None:
    assert share(world, users={world.personas["dave"].id: "use"}).status_code == 204
    browser = app.test_client()
    sign_in(browser, "dave@example.com", PASSWORD)
    page = browser.get(f"/workspaces/{world.workspace['id']}").get_data(as_text=True)
    assert 'value="stop"' in page and "Delete</a>" not in page and "change-parameters" not in page
    assert "slipway ssh carol/w1" in page
    listed = browser.get("/workspaces").get_data(as_text=True)
    assert "<td>carol</td>" in listed
    path = f"/workspaces/{world.workspace['id']}/builds"
    assert post_form(browser, path, {"transition": "delete"}, token_from="/workspaces").status_code == 403
    assert post_form(browser, path, {"transition": "stop"}, token_from="/workspaces").status_code == 302
