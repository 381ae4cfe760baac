"""The workspace page (issue 19 part 5): the build timeline (who, when, why, how long, status, version, log), the
parameters by their display names with a form that changes the mutable ones and starts a build, and the agents'
connection history. Forms mark every invalid field at once and keep what was typed."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.agents import services as agent_services
from app.agents.models import CONNECTION_HISTORY, AgentConnectionEvent
from app.core.columns import utcnow
from app.core.extensions import db
from app.core.templating import time_ago
from app.workspaces.models import Workspace, WorkspaceBuild
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import PARAMETERS
from tests.support.web import post_form, sign_in
from tests.test_agent_api import AGENT
from tests.test_agent_api import START as AGENT_START
from tests.test_agent_api import World as AgentWorld
from tests.test_workspace_updates import World

pytestmark = pytest.mark.databases("sqlite")


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
    assert "#2 stop" in stopped and "autostop" in stopped and "status-succeeded" in stopped
    assert "#1 start" in first and ">carol<" in first
    # Each build's own status: a start that succeeded reads "succeeded", never the workspace's "running".
    assert "status-succeeded" in first and "status-running" not in page[page.index('id="build-timeline"') :]
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


# Display names and descriptions; a mutable bool, a string with a rule, and an ephemeral flag.
NAMED_PARAMETERS = [
    {**PARAMETERS[0], "display_name": "CPU cores", "description": "How many cores the workspace gets."},
    {**PARAMETERS[1], "display_name": "Region"},
    {"name": "dotfiles", "display_name": "Dotfiles repository", "type": "string", "mutable": True, "required": False,
     "default_value": "https://example.com/dots", "validation_regex": "^https://",
     "validation_error": "Use an https:// URL.", "options": []},
    {"name": "gpu", "display_name": "GPU", "type": "bool", "mutable": True, "required": False,
     "default_value": "false", "options": []},
    {"name": "rebuild", "display_name": "Rebuild the cache", "type": "bool", "mutable": True, "ephemeral": True,
     "required": False, "default_value": "false", "options": []},
]  # fmt: skip


@pytest.fixture
def named(world: World) -> dict[str, Any]:
    """carol's workspace (region EU, 6 cores) on a version whose parameters have display names."""
    world.promote(world.push(NAMED_PARAMETERS))
    return world.create()


def test_the_page_shows_parameters_by_display_name_and_option_name(app: Flask, world: World, named: Any) -> None:
    page = browser(app, "carol").get(f"/workspaces/{named['id']}").get_data(as_text=True)
    card = page[page.index('id="parameters-card"') : page.index('id="build-timeline"')]
    assert "CPU cores" in card and "How many cores the workspace gets." in card and '<code title="6">6</code>' in card
    assert "Region" in card and '<code title="eu">EU</code>' in card and "fixed" in card
    assert "Rebuild the cache" in card and "this build only" in card
    assert ">size<" not in card and ">region<" not in card
    assert 'id="change-parameters"' in card
    # Who may read the workspace but not act on it sees no button.
    bobs = browser(app, "bob").get(f"/workspaces/{named['id']}").get_data(as_text=True)
    assert 'id="parameters-card"' in bobs and 'id="change-parameters"' not in bobs


def field(page: str, name: str) -> str:
    """The form control named ``param.<name>``."""
    match = re.search(rf'<(?:input|select)[^>]*name="param\.{name}"[^>]*>', page)
    assert match, f"no field param.{name}"
    return match.group(0)


def builds_of(world: World, workspace_id: str) -> list[dict[str, Any]]:
    reply = world.client.get(f"/api/v2/workspaces/{workspace_id}/builds", headers=world.personas["carol"].auth)
    return list(reply.json)


def test_change_parameters_marks_every_invalid_field_at_once_and_keeps_what_was_typed(
    app: Flask, world: World, named: Any
) -> None:
    path = f"/workspaces/{named['id']}/parameters"
    carol = browser(app, "carol")
    form = carol.get(path).get_data(as_text=True)
    assert "novalidate" in form  # the server checks every field, not the browser one at a time
    assert 'value="6"' in field(form, "size") and 'value="https://example.com/dots"' in field(form, "dotfiles")
    assert "checked" not in field(form, "gpu") and "checked" not in field(form, "rebuild")
    fixed = form[form.index('id="immutable-parameters"') :]
    assert "Region" in fixed and "<code>EU</code>" in fixed and 'name="param.region"' not in form
    before = len(builds_of(world, named["id"]))
    typed = {"param.size": "9", "param.dotfiles": "git@example.com:dots", "param.gpu": "true"}
    refused = post_form(carol, path, typed)
    page = refused.get_data(as_text=True)
    assert refused.status_code == 400
    for name, value in (("size", "9"), ("dotfiles", "git@example.com:dots")):
        control = field(page, name)
        assert 'aria-invalid="true"' in control and 'class="invalid"' in control and f'value="{value}"' in control
        assert f'id="param-{name}-error"' in page
    assert "checked" in field(page, "gpu") and "aria-invalid" not in field(page, "gpu")
    assert "value 9 is more than the maximum 8" in page and "Use an https:// URL." in page
    assert "2 fields need a change" in page and 'href="#param-size"' in page and ">CPU cores</a>" in page
    assert len(builds_of(world, named["id"])) == before  # nothing was built
    # A value below the last build's breaks the monotonic rule, in words.
    lower = post_form(carol, path, {"param.size": "5"}).get_data(as_text=True)
    assert "must be equal or greater than previous value: 6" in lower


def test_change_parameters_starts_a_build_with_the_new_values_and_forgets_ephemeral_ones(
    app: Flask, world: World, named: Any
) -> None:
    path = f"/workspaces/{named['id']}/parameters"
    carol = browser(app, "carol")
    chosen = {"param.size": "7", "param.dotfiles": "https://example.com/mine", "param.gpu": "true",
              "param.rebuild": "true"}  # fmt: skip
    started = post_form(carol, path, chosen)
    assert started.status_code == 302 and "/builds/" in started.headers["Location"]
    build = builds_of(world, named["id"])[0]
    assert build["transition"] == "start" and build["build_number"] == 2
    values = world.client.get(f"/api/v2/workspacebuilds/{build['id']}/parameters", headers=world.personas["carol"].auth)
    assert {item["name"]: item["value"] for item in values.json} == {
        "size": "7", "region": "eu", "dotfiles": "https://example.com/mine", "gpu": "true", "rebuild": "true",
    }  # fmt: skip
    # While it runs another change is refused, in words; once it is done the form starts again from what was kept.
    busy = post_form(carol, path, chosen)
    assert busy.status_code == 409 and "already active" in busy.get_data(as_text=True)
    world.finish(build)
    form = carol.get(path).get_data(as_text=True)
    assert 'value="7"' in field(form, "size") and "checked" in field(form, "gpu")
    assert "checked" not in field(form, "rebuild")  # ephemeral: asked each build, kept by none
    # An unticked checkbox is "false"; the ephemeral flag left out is its default.
    post_form(carol, path, {"param.size": "7", "param.dotfiles": "https://example.com/mine"})
    latest = builds_of(world, named["id"])[0]
    values = world.client.get(
        f"/api/v2/workspacebuilds/{latest['id']}/parameters", headers=world.personas["carol"].auth
    )
    assert {item["name"]: item["value"] for item in values.json}["gpu"] == "false"


def test_change_parameters_refuses_an_immutable_one(app: Flask, world: World, named: Any) -> None:
    path = f"/workspaces/{named['id']}/parameters"
    carol = browser(app, "carol")
    refused = post_form(carol, path, {"param.size": "6", "param.region": "us"})  # a hand-made form
    page = refused.get_data(as_text=True)
    assert refused.status_code == 400 and "This parameter is immutable" in page
    assert len(builds_of(world, named["id"])) == 1
    # The API says the same, field by field, all at once.
    bad = [{"name": "region", "value": "us"}, {"name": "size", "value": "9"}, {"name": "dotfiles", "value": "x"}]
    reply = world.start(named["id"], rich_parameter_values=bad)
    assert reply.status_code == 400
    assert sorted(item["field"] for item in reply.json["validations"]) == ["dotfiles", "region", "size"]


def test_change_parameters_is_for_who_may_act_on_the_workspace(app: Flask, world: World, named: Any) -> None:
    path = f"/workspaces/{named['id']}/parameters"
    assert browser(app, "dave").get(path).status_code == 404  # another member: no such workspace
    bob = browser(app, "bob")  # a template admin reads the workspace but does not act on it
    assert bob.get(path).status_code == 403
    assert post_form(bob, path, {"param.size": "7"}, token_from=f"/workspaces/{named['id']}").status_code == 403
    alice = browser(app, "alice")  # the deployment owner may
    assert alice.get(path).status_code == 200
    assert post_form(alice, path, {"param.size": "7"}).status_code == 302
    carol = browser(app, "carol")
    assert carol.post(path, data={"param.size": "8"}).status_code == 400  # no CSRF token
    assert len(builds_of(world, named["id"])) == 2


def test_an_emptied_required_value_is_refused_not_kept(world: World) -> None:
    body = {
        "template_id": world.template["id"],
        "name": "ws",
        "rich_parameter_values": [{"name": "region", "value": ""}],
    }
    reply = world.client.post("/api/v2/workspaces", json=body, headers=world.personas["carol"].auth)
    assert reply.status_code == 400 and reply.json["validations"] == [
        {"field": "region", "detail": "A value is required."}
    ]


def test_the_create_form_marks_every_invalid_field_at_once_and_keeps_what_was_typed(app: Flask, world: World) -> None:
    carol = browser(app, "carol")
    path = "/workspaces/new?template=dev"
    form = carol.get(path).get_data(as_text=True)
    assert "novalidate" in form and "aria-invalid" not in form
    typed = {"template": "dev", "name": "my ws!", "param.size": "9", "param.region": ""}
    refused = post_form(carol, path, typed)
    page = refused.get_data(as_text=True)
    assert refused.status_code == 400
    name_field = re.search(r'<input id="workspace-name"[^>]*>', page)
    assert name_field and 'value="my ws!"' in name_field.group(0) and 'aria-invalid="true"' in name_field.group(0)
    assert 'aria-invalid="true"' in field(page, "size") and 'value="9"' in field(page, "size")
    # region's options are radio buttons: their group (a radiogroup) is what is marked.
    assert re.search(r'<fieldset [^>]*id="param-region" data-control="radio" role="radiogroup" aria-invalid', page)
    assert "Use 1-32 letters, digits and single hyphens." in page and "value 9 is more than the maximum 8" in page
    assert "A value is required." in page and "3 fields need a change" in page
    # A name already taken is said together with the other problems.
    world.create(name="taken")
    both = post_form(carol, path, {**typed, "name": "taken", "param.region": "eu"})
    page = both.get_data(as_text=True)
    assert both.status_code == 400 and "You already have a workspace named &#39;taken&#39;" in page
    assert "2 fields need a change" in page
    # Alone, it is the API's 409; the form says it beside the name.
    alone = post_form(carol, path, {**typed, "name": "taken", "param.region": "eu", "param.size": "2"})
    assert alone.status_code == 409 and 'id="workspace-name-error"' in alone.get_data(as_text=True)
    # The API answers every field at once too.
    body = {
        "template_id": world.template["id"],
        "name": "-x-",
        "rich_parameter_values": [{"name": "size", "value": "0"}],
    }
    reply = world.client.post("/api/v2/workspaces", json=body, headers=world.personas["carol"].auth)
    assert reply.status_code == 400
    assert sorted(item["field"] for item in reply.json["validations"]) == ["name", "region", "size"]


def test_the_agent_panel_shows_its_connection_history_bounded(app: Flask, personas: dict[str, Persona]) -> None:
    agents = AgentWorld(app, personas)
    agent_id = agents.agent()["id"]
    with app.app_context():  # what the control connection records as agents come and go
        agent_services.mark_connected(agent_id, "c1")
        agent_services.mark_disconnected(agent_id, "c1")
        agent_services.mark_connected(agent_id, "c2")
        agent_services.mark_disconnected(agent_id, "stale")  # not the current connection: no event
        agent_services.mark_connected(agent_id, "c3")  # took over from c2, which never said goodbye
    path = f"/workspaces/{agents.workspace['id']}"
    page = browser(app, "carol").get(path).get_data(as_text=True)
    rows = re.findall(r'<tr class="agent-connection">.*?</tr>', page, re.S)
    assert len(rows) == 3
    newest, replaced, closed = rows
    assert "open" in newest and "data-since" in newest  # its duration counts up in the page
    assert "replaced by a newer connection" in replaced
    assert "disconnected" in closed and re.search(r'<time datetime="PT\d+S" title="[^"]+ – [^"]+">', closed)
    assert all(re.search(r"<time [^>]*data-ago>", row) for row in (newest, replaced, closed))
    # The live panel (re-read on the page's `agents` event) has it too; another member sees neither.
    panel = browser(app, "carol").get(f"/workspaces/{agents.workspace['id']}/agents/{agent_id}/panel")
    assert panel.status_code == 200 and panel.get_data(as_text=True).count('class="agent-connection"') == 3
    assert browser(app, "dave").get(f"/workspaces/{agents.workspace['id']}/agents/{agent_id}/panel").status_code == 404
    # And the API, to whoever may see the workspace.
    history = agents.api.get(f"/api/v2/workspaceagents/{agent_id}/connections", headers=personas["carol"].auth)
    assert [(item["event"], item["connection_id"]) for item in history.json] == [
        ("connected", "c3"), ("connected", "c2"), ("disconnected", "c1"), ("connected", "c1"),
    ]  # fmt: skip
    assert all(item["at"].endswith("Z") for item in history.json)
    other = agents.api.get(f"/api/v2/workspaceagents/{agent_id}/connections", headers=personas["dave"].auth)
    assert other.status_code == 404
    # However often an agent reconnects, the history keeps its newest events; the panel shows the newest ten.
    with app.app_context():
        for number in range(30):
            agent_services.mark_connected(agent_id, f"n{number}")
            agent_services.mark_disconnected(agent_id, f"n{number}")
        kept = agent_services.connection_history(agent_id)
        assert len(kept) == CONNECTION_HISTORY
        assert (kept[0].event, kept[0].connection_id) == ("disconnected", "n29")
        assert (kept[-1].event, kept[-1].connection_id) == ("connected", "n5")
        count = db.session.scalar(db.select(db.func.count()).select_from(AgentConnectionEvent))
        assert count == CONNECTION_HISTORY
    page = browser(app, "carol").get(path).get_data(as_text=True)
    assert page.count('class="agent-connection"') == 10


def test_times_to_come_on_the_page_read_in_words_and_show_the_exact_time_on_hover(
    app: Flask, world: World, named: Any
) -> None:
    with app.app_context():
        workspace = db.session.get(Workspace, named["id"])
        assert workspace is not None
        workspace.autostart_schedule = "CRON_TZ=UTC 30 9 * * *"
        workspace.next_start_at = utcnow() + timedelta(hours=3, minutes=5)
        workspace.dormant_at = utcnow() - timedelta(days=2, minutes=1)
        workspace.deleting_at = utcnow() + timedelta(days=5, minutes=1)
        db.session.commit()
    page = browser(app, "carol").get(f"/workspaces/{named['id']}").get_data(as_text=True)
    exact = r'title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" data-ago>'
    assert re.search(rf"next <strong>[^<]+</strong> \(<time [^>]*{exact}in 3 hours</time>\)", page)
    assert re.search(rf"\(<time [^>]*{exact}2 days ago</time>\): it was unused", page)
    assert re.search(rf"<time [^>]*{exact}in 5 days</time>", page)
    assert time_ago(utcnow() + timedelta(seconds=20)) == "just now"
    assert time_ago(utcnow() + timedelta(minutes=1, seconds=5)) == "in 1 minute"
    assert time_ago(utcnow() - timedelta(minutes=2, seconds=5)) == "2 minutes ago"


def test_the_agent_panel_shows_dev_containers_and_the_ai_tasks_app(app: Flask, personas: dict[str, Persona]) -> None:
    agents = AgentWorld(app, personas)
    agents.finish(agents.build("stop")["job"]["id"], [])
    agent = {
        **AGENT,
        "apps": [{**AGENT["apps"][0], "ai_task": True}, *AGENT["apps"][1:]],
        "devcontainers": [{"workspace_folder": "/workspaces/project", "config_path": ".devcontainer.json"}],
    }
    agents.finish(agents.build("start")["job"]["id"], [{**AGENT_START[0], "agents": [agent]}])
    agent_id = agents.agent()["id"]
    shown = (
        browser(app, "carol")
        .get(f"/workspaces/{agents.workspace['id']}/agents/{agent_id}/panel")
        .get_data(as_text=True)
    )
    assert re.search(r'>Web\s*<span class="badge badge-info" title="[^"]*AI task[^"]*">AI task</span>', shown)
    assert shown.count(">AI task<") == 1
    assert '<code>/workspaces/project</code> <span class="muted">(.devcontainer.json)</span>' in shown


def test_the_page_leads_with_status_and_actions_then_connect_then_the_rest(
    app: Flask, personas: dict[str, Persona]
) -> None:
    """What a person came for first: status and actions, then Connect (the agent's terminal, apps and SSH command
    with its copy button), then schedule, resources, parameters, sharing and the timeline, in the HTML's order
    (which is also the order on a phone, where the columns stack)."""
    agents = AgentWorld(app, personas)
    with app.app_context():
        agent_services.mark_connected(agents.agent()["id"], "c1")
    page = browser(app, "carol").get(f"/workspaces/{agents.workspace['id']}").get_data(as_text=True)
    marks = [
        'class="page-head"',
        'id="connect"',
        'id="schedule-card"',
        'id="resources-card"',
        'id="parameters-card"',
        'id="sharing-card"',
        'id="build-timeline"',
    ]
    positions = [page.index(mark) for mark in marks]
    assert positions == sorted(positions), dict(zip(marks, positions, strict=True))
    connect = page[page.index('id="connect"') : page.index('id="schedule-card"')]
    assert ">Connect</h2>" in connect and ">Terminal</a>" in connect and "slipway ssh w1" in connect
    assert "agent-card" in connect and "copy" in connect.lower()
    assert page.count("agent-card") == connect.count("agent-card")  # the panel moved: not shown twice


def test_a_workspace_without_agents_shows_no_connect_block(app: Flask, world: World) -> None:
    workspace = world.create()
    world.stop(workspace["id"])
    page = browser(app, "carol").get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert 'id="connect"' not in page and 'id="build-timeline"' in page


def test_the_terminal_asks_for_the_agent_now_serving_the_workspace(app: Flask, personas: dict[str, Persona]) -> None:
    """An open terminal whose socket closed asks which agent serves the workspace now: after a restart (a stop and
    a start) a new one under the same name, which it reconnects to once connected; none while stopped."""
    agents = AgentWorld(app, personas)
    old = agents.agent()["id"]
    path = f"/workspaces/{agents.workspace['id']}/agents/{old}/terminal/current"
    carol = browser(app, "carol")
    same = carol.get(path).json["agent"]
    assert same["id"] == old and same["terminal_url"].endswith(f"/agents/{old}/terminal")
    agents.finish(agents.build("stop")["job"]["id"], [])
    assert carol.get(path).json == {"agent": None}
    agents.finish(agents.build("start")["job"]["id"], AGENT_START)
    new = agents.agent()["id"]
    assert new != old
    found = carol.get(path).json["agent"]
    assert found["id"] == new and found["status"] == "connecting" and found["name"] == AGENT["name"]
    assert found["socket_path"] == f"/api/v2/workspaceagents/{new}/tunnel"
    with app.app_context():
        agent_services.mark_connected(new, "c1")
    assert carol.get(path).json["agent"]["status"] == "connected"
    # A way in is the workspace's users' alone: the template admin reads the workspace but gets no terminal.
    assert browser(app, "bob").get(path).status_code == 403
