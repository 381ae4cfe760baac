"""Lists cost the same number of queries at 10 rows and at 500: what each row shows is loaded for all of them at
once (jobs, queue places, daemon names, builds, resources, agents), never looked up row by row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.users import tokens
from app.users.models import User
from app.workspaces import services
from tests.conftest import PASSWORD, Persona
from tests.support import bulk
from tests.support.daemon import FakeDaemon, import_template
from tests.support.queries import counted
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

SMALL, LARGE = 10, 500
JOBS_PER_TURN = 10


def add_workspaces(app: Flask, template_id: str, owner_id: str, count: int, start: int = 0) -> None:
    with app.app_context():
        owner = db.session.get(User, owner_id)
        assert owner is not None
        for number in range(start, start + count):
            services.create_workspace(owner, template_id, f"w{number}", {"region": "eu"})
        db.session.remove()


@pytest.fixture(autouse=True)
def _uses_recorded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A credential's use is recorded once in LAST_USED_RESOLUTION: a day here, so that a request counted after the
    one before it never records it again, however slow the machine makes the requests in between (it once took more
    than the minute it is in production, and the list seemed to grow by two writes)."""
    monkeypatch.setattr(tokens, "LAST_USED_RESOLUTION", timedelta(days=1))


def queries(app: Flask, client: FlaskClient, path: str, headers: dict[str, str] | None = None) -> list[str]:
    # Once before counting: a credential's first use records when it was used.
    client.get(path, headers=headers or {})
    with counted(app) as statements:
        reply = client.get(path, headers=headers or {})
    assert reply.status_code == 200, reply.get_data(as_text=True)[:500]
    return statements


def test_lists_cost_the_same_queries_at_10_and_at_500_rows(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob, carol = personas["alice"], personas["bob"], personas["carol"]
    template = import_template(client, personas, FakeDaemon(client))
    daemon = FakeDaemon(client, "busy")
    # A daemon that ran a job, and one running: daemons and job lists name them.
    first = client.get("/api/v2/provisionerjobs", headers=alice.auth).json[0]
    assert daemon.call(f"/jobs/{first['id']}/acquire").status_code in (200, 409)
    add_workspaces(app, template["id"], carol.id, 1)
    workspace_id = client.get("/api/v2/workspaces", headers=carol.auth).json[0]["id"]

    def grow_each_kind_by(count: int) -> None:
        """``count`` more rows of every kind a list below shows."""
        bulk.add_workspaces(app, workspace_id, count)
        bulk.add_users(app, carol.id, count)
        bulk.add_tokens(app, carol.id, count)
        bulk.add_templates(app, template["id"], count)
        bulk.add_daemons(app, daemon.id, count)
        bulk.add_keys(app, bob.id, count)
        bulk.add_notifications(app, carol.id, count)
        bulk.add_failing_deliveries(app, carol.id, count)
        # Imports and builds made in turns, after the workspaces: at both sizes the newest jobs (a page of jobs,
        # the latest finished) are of both kinds, and the queries each kind needs are counted at both.
        for turn in range(0, count, JOBS_PER_TURN):
            bulk.add_versions(app, template["active_version_id"], min(JOBS_PER_TURN, count - turn))
            bulk.add_builds(app, workspace_id, min(JOBS_PER_TURN, count - turn), daemon.id)

    pages = app.test_client()
    sign_in(pages, "alice@example.com", PASSWORD)
    lists = {
        "users": ("/api/v2/users", alice.auth),
        "the member's tokens": ("/api/v2/users/me/tokens", carol.auth),
        "templates": ("/api/v2/templates", carol.auth),
        "a template's versions": (f"/api/v2/templates/{template['id']}/versions", bob.auth),
        "a workspace's builds": (f"/api/v2/workspaces/{workspace_id}/builds", carol.auth),
        "daemons": ("/api/v2/provisionerdaemons", alice.auth),
        "provisioner keys": ("/api/v2/provisionerkeys", bob.auth),
        "jobs": ("/api/v2/provisionerjobs?limit=500", alice.auth),
        "the member's workspaces": ("/api/v2/workspaces", carol.auth),
        "every workspace, for the owner": ("/api/v2/workspaces", alice.auth),
        "the member's inbox": ("/api/v2/notifications/inbox?limit=1000", carol.auth),
        "failing deliveries": ("/api/v2/notifications/deliveries?limit=1000", alice.auth),
    }
    # Each list also a page at a time, which adds the count of the whole.
    checked = {
        **{name: (path, headers, client) for name, (path, headers) in lists.items()},
        **{
            f"a page of {name}": (path.split("?")[0] + "?limit=25&offset=5", headers, client)
            for name, (path, headers) in lists.items()
        },
        "the workspaces page": ("/workspaces", None, pages),
        "the users page": ("/users", None, pages),
        "the templates page": ("/templates", None, pages),
        "the provisioners page": ("/provisioners", None, pages),
        "the lifecycle page (with failing deliveries)": ("/workspaces/lifecycle", None, pages),
    }

    grow_each_kind_by(SMALL)
    small = {name: queries(app, caller, path, headers) for name, (path, headers, caller) in checked.items()}
    grow_each_kind_by(LARGE - SMALL)
    for name, (path, headers) in lists.items():
        reply = client.get(path, headers=headers)
        assert int(reply.headers["X-Total-Count"]) >= LARGE, name  # so that the counts below compare something
    large = {name: queries(app, caller, path, headers) for name, (path, headers, caller) in checked.items()}

    grown = {name: (len(small[name]), len(large[name])) for name in checked if len(large[name]) != len(small[name])}
    assert not grown, "\n\n".join(
        [f"{name}: {before} -> {after} queries" for name, (before, after) in grown.items()]
        + [f"{name} at {LARGE} rows:\n" + "\n".join(large[name]) for name in grown]
    )
