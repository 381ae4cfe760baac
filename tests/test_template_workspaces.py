"""The template page's Workspaces card (a count per version, the outdated ones, owners, paged, as each person may
see them) and what its admins do from it: Update all (asked first, queued at low priority, reported per
workspace, audited) and Notify owners (once per workspace and active version)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.audit.models import AuditLog
from app.core.columns import utcnow
from app.core.extensions import db
from app.workspaces.models import Workspace
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.bulk import add_workspaces
from tests.support.daemon import PARAMETERS, FakeDaemon, import_template
from tests.support.web import csrf_token, sign_in

pytestmark = pytest.mark.databases("sqlite")

# The new version takes only "eu" for region: a workspace made with "us" cannot update without new input.
EU_ONLY = [PARAMETERS[0], {**PARAMETERS[1], "options": [{"name": "EU", "value": "eu"}]}]


class World:
    def __init__(self, app: Flask, personas: dict[str, Persona]) -> None:
        self.app, self.personas, self.api = app, personas, app.test_client()
        self.daemon = FakeDaemon(self.api)
        self.template = import_template(self.api, personas, self.daemon)

    def workspace(self, who: str, name: str, region: str = "eu", *, finish: bool = True) -> dict[str, Any]:
        body = {"template_id": self.template["id"], "name": name,
                "rich_parameter_values": [{"name": "region", "value": region}]}  # fmt: skip
        made = self.api.post("/api/v2/workspaces", json=body, headers=self.personas[who].auth)
        assert made.status_code == 201, made.json
        if finish:
            self.finish(made.json["latest_build"]["job"]["id"])
        return dict(made.json)

    def finish(self, job_id: str) -> None:
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        assert self.daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {}}).status_code == 204


def page_of(client: FlaskClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return response.get_data(as_text=True)


def signed_in(app: Flask, email: str) -> FlaskClient:
    client = app.test_client()
    sign_in(client, email, PASSWORD)
    return client


def outdated_world(app: Flask, personas: dict[str, Persona]) -> tuple[World, str]:
    """dev with carol's c1 (eu), c2 (us: needs input on v2), c3 (dormant), c4 (a build under way), dave's d1, on
    the first version; then a second version (eu only) made active, and alice's a1 on it."""
    world = World(app, personas)
    c4 = world.workspace("carol", "c4")
    for name, region in (("c1", "eu"), ("c2", "us"), ("c3", "eu")):
        world.workspace("carol", name, region)
    world.workspace("dave", "d1")
    second = push_second_version(world)
    world.workspace("alice", "a1")
    stop = world.api.post(f"/api/v2/workspaces/{c4['id']}/builds", json={"transition": "stop"},
                          headers=personas["carol"].auth)  # fmt: skip
    assert stop.status_code == 201, stop.json  # pending: no daemon takes it in this test
    with app.app_context():
        db.session.execute(update(Workspace).where(Workspace.name == "c3").values(dormant_at=utcnow()))
        db.session.commit()
    return world, second


def push_second_version(world: World) -> str:
    """v2 of dev, imported with EU_ONLY and made active."""
    bob, template_id = world.personas["bob"], world.template["id"]
    archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n# v2\n'})
    upload = world.api.post("/api/v2/files", data=archive, headers={**bob.auth, "Content-Type": "application/x-tar"})
    body = {"file_id": upload.json["id"], "template_id": template_id, "name": "v2"}
    pushed = world.api.post("/api/v2/templateversions", json=body, headers=bob.auth)
    assert pushed.status_code == 201, pushed.json
    job_id = pushed.json["job"]["id"]
    assert world.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    result = {"readme": "", "parameters": EU_ONLY, "variables": [], "resources": {"start": [], "stop": []}}
    assert world.daemon.call(f"/jobs/{job_id}/complete", {"template_import": result}).status_code == 204
    promoted = world.api.patch(f"/api/v2/templates/{template_id}/versions", json={"id": pushed.json["id"]},
                               headers=bob.auth)  # fmt: skip
    assert promoted.status_code == 200, promoted.json
    return str(pushed.json["id"])


@pytest.mark.databases("sqlite", "postgresql")  # the counts and the visibility rule are SQL of their own
def test_the_template_page_lists_its_workspaces_as_each_person_may_see_them(
    app: Flask, personas: dict[str, Persona]
) -> None:
    outdated_world(app, personas)
    owner = page_of(signed_in(app, "alice@example.com"), "/templates/dev")
    card = owner[owner.index('id="template-workspaces"') :]
    assert "6 workspaces, <strong>5 outdated</strong>" in card
    assert re.search(r'data-version="v2">v2 \(active\): 1<', card) and ": 5</span>" in card
    assert all(f'data-workspace="{name}"' in card for name in ("a1", "c1", "c2", "c3", "c4", "d1"))
    assert re.search(r'data-workspace="d1">.*?<td>dave</td>.*?outdated', card, re.S)
    assert not re.search(r'data-workspace="a1">.*?<td>alice</td>[^<]*<td>v2</td>\s*<td>[^<]*outdated', card, re.S)
    assert 'id="update-all"' in card and 'id="notify-owners"' in card

    # A member sees only theirs (the workspaces list's rule), with no bulk actions.
    carol = page_of(signed_in(app, "carol@example.com"), "/templates/dev")
    assert "4 workspaces, <strong>4 outdated</strong>" in carol and 'data-workspace="d1"' not in carol
    assert 'data-workspace="a1"' not in carol and 'id="update-all"' not in carol
    dave = page_of(signed_in(app, "dave@example.com"), "/templates/dev")
    assert "1 workspace, <strong>1 outdated</strong>" in dave and 'data-workspace="c1"' not in dave

    # Paged, 25 to a page, with its own page parameter (the versions card keeps ?page=).
    with app.app_context():
        d1 = db.session.scalar(select(Workspace.id).where(Workspace.name == "d1"))
    assert d1 is not None
    add_workspaces(app, d1, 25)
    first = page_of(signed_in(app, "alice@example.com"), "/templates/dev")
    assert "31 workspaces" in first and "1–25 of 31" in first and "workspaces_page=2" in first
    second = page_of(signed_in(app, "alice@example.com"), "/templates/dev?workspaces_page=2")
    assert "26–31 of 31" in second


def test_notify_owners_then_update_all_asks_first_queues_at_low_priority_and_reports_each(
    app: Flask, personas: dict[str, Persona]
) -> None:
    world, second = outdated_world(app, personas)
    alice = signed_in(app, "alice@example.com")
    notify_owners(app, world, alice)
    asked = page_of(alice, "/templates/dev/update-all")
    rows = dict(re.findall(r'data-workspace="(\w+)" data-outcome="(\w+)"', asked))
    assert rows == {"c1": "queued", "c2": "skipped", "c3": "skipped", "c4": "skipped", "d1": "queued"}
    assert "parameters need input (region)" in asked and "dormant" in asked and "a build is already pending" in asked
    assert "<strong>2 will be started on v2</strong>" in asked
    outdated = world.api.get("/api/v2/workspaces?q=outdated:true", headers=personas["alice"].auth).json
    assert len(outdated) == 5  # asking queued nothing

    token = csrf_token(alice, "/templates/dev/update-all")
    done = alice.post("/templates/dev/update-all", data={"csrf_token": token})
    text = done.get_data(as_text=True)
    assert done.status_code == 200 and "<strong>2 updates queued</strong>" in text and "3 skipped" in text
    assert dict(re.findall(r'data-workspace="(\w+)" data-outcome="(\w+)"', text))["c1"] == "queued"
    for name in ("c1", "d1"):
        [workspace] = [item for item in all_workspaces(world) if item["name"] == name]
        build = workspace["latest_build"]
        assert build["template_version_id"] == second and build["transition"] == "start"
        assert build["job"]["priority"] == "low" and build["job"]["status"] == "pending"
    [c2] = [item for item in all_workspaces(world) if item["name"] == "c2"]
    assert c2["latest_build"]["template_version_id"] != second
    with app.app_context():
        entry = db.session.scalars(
            select(AuditLog).where(AuditLog.resource_type == "template").order_by(AuditLog.id.desc())
        ).first()
        assert entry is not None and entry.username == "alice"
        summary = json.loads(entry.diff)["update_all"]["new"]
        assert summary["queued"] == ["c1", "d1"] and summary["skipped"] == ["c2", "c3", "c4"]

    # Again: c1 and d1 are building now, so nothing more is queued.
    again = alice.post("/templates/dev/update-all", data={"csrf_token": token}).get_data(as_text=True)
    assert "<strong>0 updates queued</strong>" in again

    # A template admin sees the plan but may not build others' workspaces (Coder's role); members are refused.
    bob = page_of(signed_in(app, "bob@example.com"), "/templates/dev/update-all")
    assert "you may not build it" in bob
    carol = signed_in(app, "carol@example.com")
    assert carol.get("/templates/dev/update-all").status_code == 403
    own_token = csrf_token(carol, "/templates/dev")
    assert carol.post("/templates/dev/update-all", data={"csrf_token": own_token}).status_code == 403


def all_workspaces(world: World) -> list[dict[str, Any]]:
    return list(world.api.get("/api/v2/workspaces", headers=world.personas["alice"].auth).json)


def notify_owners(app: Flask, world: World, alice: FlaskClient) -> None:
    """Each owner of an outdated workspace is told once per workspace and active version; audited."""
    personas = world.personas
    notify_token = csrf_token(alice, "/templates/dev")
    sent = alice.post("/templates/dev/notify-outdated", data={"csrf_token": notify_token}, follow_redirects=True)
    assert "Notified the owners of 5: c1, c2, c3, c4, d1." in sent.get_data(as_text=True)
    inbox = world.api.get("/api/v2/notifications/inbox", headers=personas["carol"].auth).json
    titles = sorted(item["title"] for item in inbox if item["event"] == "workspace_outdated")
    assert titles == [f"Update {name}: dev has a new version" for name in ("c1", "c2", "c3", "c4")]
    assert [item["title"] for item in world.api.get("/api/v2/notifications/inbox", headers=personas["dave"].auth).json
            if item["event"] == "workspace_outdated"] == ["Update d1: dev has a new version"]  # fmt: skip

    repeat = alice.post("/templates/dev/notify-outdated", data={"csrf_token": notify_token}, follow_redirects=True)
    assert "Not notified again: c1, c2, c3, c4, d1 (already told about v2" in repeat.get_data(as_text=True)
    assert len(world.api.get("/api/v2/notifications/inbox", headers=personas["dave"].auth).json) == 1
    with app.app_context():
        entries = list(db.session.scalars(select(AuditLog.diff).where(AuditLog.resource_type == "template")))
        assert sum("notify_outdated" in diff for diff in entries) == 2
    carol = signed_in(app, "carol@example.com")
    own_token = csrf_token(carol, "/templates/dev")
    assert carol.post("/templates/dev/notify-outdated", data={"csrf_token": own_token}).status_code == 403
