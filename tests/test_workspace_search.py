"""Coder's workspace filter (``?q=owner:me template:dev status:running outdated:true name:al``), in the API and in
the workspaces page's search box: each term narrows the list in SQL, and a term it cannot read says what it takes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from app.core.extensions import db
from app.workspaces.models import Workspace
from tests.conftest import PASSWORD, Persona
from tests.support.archives import tar_of
from tests.support.daemon import PARAMETERS, RESOURCES, FakeDaemon, import_template
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")


class Fleet:
    """alpha (carol, dev, running), beta (carol, dev, pending), gamma (carol, other, failed), delta (dave, dev,
    running); then dev gets a new active version, so that dev's workspaces are outdated."""

    def __init__(self, client: FlaskClient, personas: dict[str, Persona]) -> None:
        self.client, self.personas = client, personas
        self.daemon = FakeDaemon(client)
        self.dev = import_template(client, personas, self.daemon, name="dev")
        self.other = import_template(client, personas, self.daemon, name="other")
        self.create("carol", "alpha", self.dev, outcome="complete")
        self.create("carol", "beta", self.dev, outcome=None)
        self.create("carol", "gamma", self.other, outcome="fail")
        self.create("dave", "delta", self.dev, outcome="complete")
        self.promote_a_new_version_of(self.dev)

    def create(self, who: str, name: str, template: dict[str, Any], outcome: str | None) -> None:
        region = [{"name": "region", "value": "eu"}]
        body = {"template_id": template["id"], "name": name, "rich_parameter_values": region}
        created = self.client.post("/api/v2/workspaces", json=body, headers=self.personas[who].auth)
        assert created.status_code == 201, created.json
        job_id = created.json["latest_build"]["job"]["id"]
        if outcome is None:
            return
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        body = {"workspace_build": {"resources": []}} if outcome == "complete" else {"error": "Error: boom"}
        assert self.daemon.call(f"/jobs/{job_id}/{outcome}", body).status_code == 204

    def promote_a_new_version_of(self, template: dict[str, Any]) -> None:
        bob = self.personas["bob"]
        archive = tar_of({"main.tf": 'resource "terraform_data" "home" {}\n'})
        tar = {**bob.auth, "Content-Type": "application/x-tar"}
        upload = self.client.post("/api/v2/files", data=archive, headers=tar)
        body = {"file_id": upload.json["id"], "template_id": template["id"]}
        version = self.client.post("/api/v2/templateversions", json=body, headers=bob.auth)
        assert version.status_code == 201, version.json
        job_id = version.json["job"]["id"]
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        done = {"template_import": {"parameters": PARAMETERS, "resources": RESOURCES}}
        assert self.daemon.call(f"/jobs/{job_id}/complete", done).status_code == 204
        promoted = self.client.patch(
            f"/api/v2/templates/{template['id']}/versions", json={"id": version.json["id"]}, headers=bob.auth
        )
        assert promoted.status_code == 200, promoted.json

    def names(self, who: str, q: str) -> list[str]:
        reply = self.client.get("/api/v2/workspaces", query_string={"q": q}, headers=self.personas[who].auth)
        assert reply.status_code == 200, (q, reply.json)
        return sorted(item["name"] for item in reply.json)


@pytest.fixture
def fleet(client: FlaskClient, personas: dict[str, Persona]) -> Fleet:
    return Fleet(client, personas)


def test_each_term_narrows_the_list(fleet: Fleet) -> None:
    cases = {
        "owner:carol": ["alpha", "beta", "gamma"],
        "owner:CAROL": ["alpha", "beta", "gamma"],
        "owner:me": [],  # alice owns none
        "template:other": ["gamma"],
        "status:running": ["alpha", "delta"],
        "status:pending": ["beta"],
        "status:failed": ["gamma"],
        "status:stopped": [],
        "name:alp": ["alpha"],
        "ta": ["beta", "delta"],  # a bare word is name:
        "outdated:true": ["alpha", "beta", "delta"],
        "outdated:false": ["gamma"],
        "owner:carol status:running outdated:true": ["alpha"],
        'name:"gam"  template:other': ["gamma"],
        "": ["alpha", "beta", "delta", "gamma"],
    }
    assert {q: fleet.names("alice", q) for q in cases} == cases
    # Status and version are the latest build's: stopped, alpha is no longer running.
    alpha = fleet.client.get("/api/v2/workspaces?q=name:alpha", headers=fleet.personas["carol"].auth).json[0]
    stop = fleet.client.post(
        f"/api/v2/workspaces/{alpha['id']}/builds", json={"transition": "stop"}, headers=fleet.personas["carol"].auth
    )
    assert stop.status_code == 201, stop.json
    assert fleet.daemon.call(f"/jobs/{stop.json['job']['id']}/acquire").status_code == 200
    assert fleet.daemon.call(f"/jobs/{stop.json['job']['id']}/complete", {"workspace_build": {}}).status_code == 204
    shown = fleet.client.get(f"/api/v2/workspaces/{alpha['id']}", headers=fleet.personas["carol"].auth).json
    assert shown["status"] == "stopped", shown
    assert fleet.names("alice", "status:running") == ["delta"]
    assert fleet.names("alice", "status:stopped") == ["alpha"]
    assert fleet.names("alice", "outdated:true") == ["alpha", "beta", "delta"]  # a stop keeps its version
    # A member's filter narrows only what they may see, owner:me included.
    assert fleet.names("carol", "owner:me status:stopped") == ["alpha"]
    assert fleet.names("dave", "owner:carol") == []


def test_a_filtered_list_pages_and_counts(fleet: Fleet) -> None:
    auth = fleet.personas["alice"].auth
    reply = fleet.client.get("/api/v2/workspaces?q=template:dev&limit=2", headers=auth)
    assert [item["name"] for item in reply.json] == ["alpha", "beta"] and reply.headers["X-Total-Count"] == "3"


@pytest.mark.parametrize(
    ("q", "says"),
    [
        ("color:red", "Unknown filter 'color': use owner:, template:, status:, outdated:, name:."),
        ("status:bogus", "Unknown status 'bogus': use running,"),
        ("outdated:maybe", "outdated: takes true or false, not 'maybe'."),
        ("owner:", "owner: needs a value, as in owner:me."),
        ("status:running status:stopped", "status: is given twice"),
        ('name:"open', "A quote is not closed."),
    ],
)
def test_a_term_it_cannot_read_is_a_400_that_says_what_it_takes(fleet: Fleet, q: str, says: str) -> None:
    reply = fleet.client.get("/api/v2/workspaces", query_string={"q": q}, headers=fleet.personas["alice"].auth)
    assert reply.status_code == 400 and says in reply.json["message"], reply.json
    assert reply.json["validations"][0]["field"] == "q"


def test_the_workspaces_page_has_the_search_box(app: Flask, fleet: Fleet) -> None:
    page = app.test_client()
    sign_in(page, "alice@example.com", PASSWORD)
    shown = page.get("/workspaces?q=status:running").get_data(as_text=True)
    assert "<strong>alpha</strong>" in shown and "<strong>delta</strong>" in shown
    assert "<strong>beta</strong>" not in shown and 'value="status:running"' in shown
    # The table's live updates watch the same filtered page.
    assert "q=status:running" in shown.split("/workspaces/events?", 1)[1].split('"', 1)[0]
    assert "No workspace matches" in page.get("/workspaces?q=name:zzz").get_data(as_text=True)
    bad = page.get("/workspaces?q=colour:red")
    assert bad.status_code == 400
    html = bad.get_data(as_text=True)
    assert "Unknown filter &#39;colour&#39;" in html and 'value="colour:red"' in html and 'aria-invalid="true"' in html


def test_the_list_reads_in_the_order_asked(app: Flask, fleet: Fleet) -> None:
    """``?sort=`` in the API and the page's column headers: by name either way, by creation, by last use (never used
    counts as longest ago); the live updates and the pages keep the order; an unknown one says what it takes."""
    with app.app_context():
        db.session.execute(update(Workspace).where(Workspace.name == "gamma").values(last_used_at=datetime.now(UTC)))
        db.session.commit()

    def ordered(sort: str) -> list[str]:
        reply = fleet.client.get(f"/api/v2/workspaces?sort={sort}", headers=fleet.personas["alice"].auth)
        assert reply.status_code == 200, reply.json
        return [item["name"] for item in reply.json]

    assert ordered("") == ordered("name") == ["alpha", "beta", "delta", "gamma"]
    assert ordered("-name") == ["gamma", "delta", "beta", "alpha"]
    assert ordered("created") == ["alpha", "beta", "gamma", "delta"]
    assert ordered("-last_used")[0] == "gamma" and ordered("last_used")[-1] == "gamma"
    bad = fleet.client.get("/api/v2/workspaces?sort=size", headers=fleet.personas["alice"].auth)
    assert bad.status_code == 400 and bad.json["validations"][0]["field"] == "sort"

    page = app.test_client()
    sign_in(page, "alice@example.com", PASSWORD)
    shown = page.get("/workspaces?sort=-name&q=owner:carol").get_data(as_text=True)
    assert shown.index("<strong>gamma</strong>") < shown.index("<strong>alpha</strong>")
    assert 'aria-sort="descending"' in shown and "sort=name" in shown  # the header turns it around
    assert "sort=-name" in shown.split("/workspaces/events?", 1)[1].split('"', 1)[0]  # live updates keep it
    assert page.get("/workspaces?sort=size").status_code == 400
