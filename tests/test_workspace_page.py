"""The workspace page (issue 19 part 5): the build timeline (who, when, why, how long, status, version, log), the
parameters by their display names with a form that changes the mutable ones and starts a build, and the agents'
connection history. Forms mark every invalid field at once and keep what was typed."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.extensions import db
from app.workspaces.models import WorkspaceBuild
from tests.conftest import PASSWORD, Persona
from tests.support.web import sign_in
from tests.test_workspace_updates import World


def browser(app: Flask, who: str) -> FlaskClient:
    pages = app.test_client()
    sign_in(pages, f"{who}@example.com", PASSWORD)
    return pages


def timeline_rows(page: str) -> list[str]:
    section = page[page.index('id="build-timeline"') :]
    return re.findall(r'<tr class="timeline-build".*?</tr>', section, re.S)


@pytest.fixture
def world(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> World:
    return World(client, personas)


def test_the_timeline_shows_each_build_with_who_why_when_how_long_status_version_and_log(
    app: Flask, world: World
) -> None:
    workspace = world.create()
    world.stop(workspace["id"])
    queued = world.start(workspace["id"], who="alice")  # the deployment owner starts carol's workspace
    assert queued.status_code == 201, queued.json
    with app.app_context():  # as the lifecycle executor would have queued it
        stop = db.session.scalar(db.select(WorkspaceBuild).where(WorkspaceBuild.build_number == 2))
        assert stop is not None
        stop.reason = "autostop"
        db.session.commit()
    path = f"/workspaces/{workspace['id']}"
    page = browser(app, "carol").get(path).get_data(as_text=True)
    rows = timeline_rows(page)
    assert [re.search(r'data-build-number="(\d+)"', row).group(1) for row in rows] == ["3", "2", "1"]  # type: ignore[union-attr]
    newest, stopped, first = rows
    assert "#3 start" in newest and "alice" in newest and "manual" in newest and "status-pending" in newest
    assert "queued" in newest  # not run yet: no duration
    assert "#2 stop" in stopped and "autostop" in stopped and "status-stopped" in stopped
    assert "#1 start" in first and ">carol<" in first
    carol_auth = world.personas["carol"].auth
    version = world.client.get(f"/api/v2/templateversions/{world.v1}", headers=carol_auth).json["name"]
    for row in (stopped, first):
        # When (relative, with the exact time on hover), how long it ran (exact span on hover), the version, the log.
        assert re.search(r'<time datetime="[^"]+Z" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" data-ago>', row)
        assert re.search(r'<time datetime="PT\d+S" title="[^"]+ – [^"]+">\d+s</time>', row)
        assert f"<code>{version}</code>" in row
        assert re.search(r'href="/builds/[^"]+#log"', row)
    # The template admin reads it too; another member may not.
    assert "build-timeline" in browser(app, "bob").get(path).get_data(as_text=True)
    assert browser(app, "dave").get(path).status_code == 404


def test_the_timeline_pages_through_many_builds(app: Flask, world: World) -> None:
    workspace = world.create()
    for _ in range(13):
        world.stop(workspace["id"])
        reply = world.start(workspace["id"])
        assert reply.status_code == 201, reply.json
        world.finish(reply.json)
    path = f"/workspaces/{workspace['id']}"
    carol = browser(app, "carol")
    first_page = carol.get(path).get_data(as_text=True)
    assert len(timeline_rows(first_page)) == 25 and "1–25 of 27" in first_page
    second = carol.get(f"{path}?page=2").get_data(as_text=True)
    assert [row.count('data-build-number="') for row in timeline_rows(second)] == [1, 1]
    assert 'data-build-number="2"' in second and 'data-build-number="1"' in second
    # The page's live refresh re-reads the page it shows.
    assert f'hx-get="{path}?page=2"' in second
