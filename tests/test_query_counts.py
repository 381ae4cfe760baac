"""Lists cost the same number of queries at 10 rows and at 200: what each row shows is loaded for all of them at
once (jobs, queue places, daemon names, builds, resources, agents), never looked up row by row."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.users.models import User
from app.workspaces import services
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.queries import counted
from tests.support.web import sign_in


def add_workspaces(app: Flask, template_id: str, owner_id: str, count: int, start: int = 0) -> None:
    with app.app_context():
        owner = db.session.get(User, owner_id)
        assert owner is not None
        for number in range(start, start + count):
            services.create_workspace(owner, template_id, f"w{number}", {"region": "eu"})
        db.session.remove()


def queries(app: Flask, client: FlaskClient, path: str, headers: dict[str, str] | None = None) -> int:
    # Once before counting: a token's first use in a minute also records when it was last used.
    client.get(path, headers=headers or {})
    with counted(app) as statements:
        reply = client.get(path, headers=headers or {})
    assert reply.status_code == 200, reply.get_data(as_text=True)[:500]
    return len(statements)


@pytest.fixture
def template_id(client: FlaskClient, personas: dict[str, Persona]) -> str:
    daemon = FakeDaemon(client)
    return str(import_template(client, personas, daemon)["id"])


def test_lists_cost_the_same_queries_at_10_and_at_200_rows(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], template_id: str
) -> None:
    carol, alice = personas["carol"], personas["alice"]
    daemon = FakeDaemon(client, "busy")
    # A daemon that ran a job, and one running: daemons and job lists name them.
    first = client.get("/api/v2/provisionerjobs", headers=alice.auth).json[0]
    assert daemon.call(f"/jobs/{first['id']}/acquire").status_code in (200, 409)
    pages = app.test_client()
    sign_in(pages, "alice@example.com", PASSWORD)
    checked = {
        "the member's workspaces": ("/api/v2/workspaces", carol.auth, client),
        "every workspace, for the owner": ("/api/v2/workspaces", alice.auth, client),
        "a page of workspaces": ("/api/v2/workspaces?limit=25&offset=5", alice.auth, client),
        "jobs": ("/api/v2/provisionerjobs?limit=500", alice.auth, client),
        "daemons": ("/api/v2/provisionerdaemons", alice.auth, client),
        "the workspaces page": ("/workspaces", None, pages),
        "the provisioners page": ("/provisioners", None, pages),
    }

    add_workspaces(app, template_id, carol.id, 10)
    small = {name: queries(app, caller, path, headers) for name, (path, headers, caller) in checked.items()}
    add_workspaces(app, template_id, carol.id, 190, start=10)
    assert len(client.get("/api/v2/workspaces", headers=carol.auth).json) == 200
    large = {name: queries(app, caller, path, headers) for name, (path, headers, caller) in checked.items()}

    assert large == small
