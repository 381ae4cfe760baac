"""The connection log in-process: app sessions (one row per viewer and app, ended when idle), tunnel rows ended by
their holder or, when its replica died, by the sweep; rows ended when access is removed or the workspace stops; the
API's filter and paging; who may read it. Real SSH, port-forward and browser app connections are in
tests/test_path_apps_ssh_e2e.py."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select, update

from app.agents import connections, tunnels
from app.connectionlog import api as connectionlog_api
from app.connectionlog import services as connlog
from app.connectionlog.models import (
    REASON_ACCESS_REMOVED,
    REASON_CLOSED,
    REASON_LOST,
    REASON_TIMED_OUT,
    REASON_WORKSPACE_STOPPED,
    TYPE_SSH,
    TYPE_WORKSPACE_APP,
    VIA_HTTP,
    ConnectionLog,
)
from app.connectionlog.search import log_query
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.users import services as users
from app.users.models import STATUS_SUSPENDED, User
from app.workspaces.models import Workspace
from protocol.agentapi import CLOSE_ACCESS_REVOKED
from tests.conftest import PASSWORD, Persona
from tests.support.web import sign_in
from tests.test_agent_api import World
from tests.test_query_plans import plan

pytestmark = pytest.mark.databases("sqlite", "postgresql")

BROWSER = connlog.Origin("203.0.113.7", "Mozilla/5.0 (test)")
APP = connlog.Way(TYPE_WORKSPACE_APP, "main", "code", via=VIA_HTTP)


@pytest.fixture
def world(app: Flask, personas: dict[str, Persona]) -> World:
    return World(app, personas)


def _people(app: Flask) -> dict[str, User]:
    return {user.username: user for user in db.session.scalars(select(User))}


def _row(row_id: str) -> ConnectionLog:
    db.session.expire_all()
    row = db.session.get(ConnectionLog, row_id)
    assert row is not None
    return row


def _workspace(world: World) -> Workspace:
    workspace = db.session.get(Workspace, world.workspace["id"])
    assert workspace is not None
    return workspace


def test_an_app_session_is_one_row_per_viewer_and_app_until_it_goes_idle(app: Flask, world: World) -> None:
    with app.test_request_context():
        people, client, workspace = _people(app), get_redis(), _workspace(world)
        carol, alice = people["carol"], people["alice"]
        first = connlog.touch_app_session(client, carol, workspace, APP, BROWSER, "agent/code")
        assert connlog.touch_app_session(client, carol, workspace, APP, BROWSER, "agent/code") == first
        other_app = connlog.touch_app_session(client, carol, workspace, APP, BROWSER, "agent/ide")
        other_viewer = connlog.touch_app_session(client, alice, workspace, APP, BROWSER, "agent/code")
        other_browser = connlog.touch_app_session(
            client, carol, workspace, APP, connlog.Origin("203.0.113.7", "curl/8"), "agent/code"
        )
        assert len({first, other_app, other_viewer, other_browser}) == 4
        row = _row(first)
        assert (row.username, row.workspace_name, row.workspace_owner_username, row.agent_name) == (
            "carol",
            "w1",
            "carol",
            "main",
        )
        assert (row.ip, row.user_agent, row.type, row.slug_or_port) == (
            BROWSER.ip,
            BROWSER.user_agent,
            TYPE_WORKSPACE_APP,
            "code",
        )

        assert connlog.end_idle_app_sessions() == 0  # all used just now
        later = utcnow() + connlog.APP_SESSION_IDLE + connlog.SEEN_EVERY + timedelta(seconds=1)
        assert connlog.end_idle_app_sessions(later) == 4
        ended = _row(first)
        assert ended.disconnect_reason == REASON_TIMED_OUT
        assert ended.disconnect_time == ended.last_seen_at  # at its last request, not when the sweep noticed

        # Its Redis name outlived the row: the next request opens a new session rather than renew an ended one.
        client.delete(connlog.app_session_key(carol, BROWSER, "agent/code") + ":seen")
        again = connlog.touch_app_session(client, carol, workspace, APP, BROWSER, "agent/code")
        assert again != first and _row(again).disconnect_time is None


def test_a_tunnel_row_ends_with_its_relays_reason_and_a_dead_holders_row_is_swept(app: Flask, world: World) -> None:
    with app.test_request_context():
        people, client = _people(app), get_redis()
        holder = tunnels.Holder(people["carol"].id, world.workspace["id"])
        ssh = connlog.Way(TYPE_SSH, "main")
        connections.tunnel_opened("tunnel-closed", holder, ssh, BROWSER)
        connections.tunnel_opened("tunnel-revoked", holder, ssh, BROWSER)
        connections.tunnel_opened("tunnel-dead", holder, ssh, BROWSER)
        connections.tunnel_closed("tunnel-closed", holder.workspace_id, tunnels.TunnelEnd(by_endpoint=True))
        connections.tunnel_closed(
            "tunnel-revoked", holder.workspace_id, tunnels.TunnelEnd(peer_code=CLOSE_ACCESS_REVOKED)
        )
        assert _row("tunnel-closed").disconnect_reason == REASON_CLOSED
        assert _row("tunnel-revoked").disconnect_reason == REASON_ACCESS_REMOVED

        # "tunnel-dead"'s replica died: no half beats for it. Young rows are left alone (the holder may not have
        # beaten yet), older ones are ended as lost.
        assert connections.sweep_connection_log(app.config["SLIPWAY_SETTINGS"]) == 0
        _row("tunnel-dead").connect_time = utcnow() - connections.HOLDER_GRACE * 2
        db.session.commit()
        client.set(f"{tunnels.PREFIX}tunnel-dead:alive-user", b"1", ex=30)
        assert connections.sweep_connection_log(app.config["SLIPWAY_SETTINGS"]) == 0  # still beating
        client.delete(f"{tunnels.PREFIX}tunnel-dead:alive-user")
        assert connections.sweep_connection_log(app.config["SLIPWAY_SETTINGS"]) == 1
        assert _row("tunnel-dead").disconnect_reason == REASON_LOST
        # A holder that was only slow has the last word.
        connections.tunnel_closed("tunnel-dead", holder.workspace_id, tunnels.TunnelEnd(by_endpoint=True))
        assert _row("tunnel-dead").disconnect_reason == REASON_CLOSED


def test_a_silent_tunnel_into_a_stopped_workspace_ended_because_it_stopped(app: Flask, world: World) -> None:
    stop = world.build("stop")
    with app.test_request_context():
        people = _people(app)
        holder = tunnels.Holder(people["carol"].id, world.workspace["id"])
        app_row = connlog.touch_app_session(get_redis(), people["carol"], _workspace(world), APP, BROWSER, "a/b")
        connections.tunnel_opened("t1", holder, connlog.Way(TYPE_SSH, "main"), BROWSER)  # (a session of its own)
        connections.tunnel_closed("t1", holder.workspace_id, tunnels.TunnelEnd(peer_code=1006))
        assert _row("t1").disconnect_reason == REASON_WORKSPACE_STOPPED
        connections.sweep_connection_log(app.config["SLIPWAY_SETTINGS"])
        assert _row(app_row).disconnect_reason == REASON_WORKSPACE_STOPPED
    assert stop["transition"] == "stop"


def test_app_sessions_end_when_their_viewer_loses_access(app: Flask, world: World) -> None:
    with app.test_request_context():
        people, client, workspace = _people(app), get_redis(), _workspace(world)
        carols = connlog.touch_app_session(client, people["carol"], workspace, APP, BROWSER, "a/b")
        alices = connlog.touch_app_session(client, people["alice"], workspace, APP, BROWSER, "a/b")
        users.update_user(people["alice"], people["carol"].id, status=STATUS_SUSPENDED)
        assert _row(carols).disconnect_reason == REASON_ACCESS_REMOVED
        assert _row(alices).disconnect_time is None  # the owner still may


def _seed(app: Flask, world: World) -> list[str]:
    with app.test_request_context():
        people, client, workspace = _people(app), get_redis(), _workspace(world)
        holder = tunnels.Holder(people["carol"].id, workspace.id)
        ids = [connlog.touch_app_session(client, people["alice"], workspace, APP, BROWSER, "a/b")]
        for number in range(5):
            connections.tunnel_opened(f"ssh-{number}", holder, connlog.Way(TYPE_SSH, "main"), BROWSER)
            ids.append(f"ssh-{number}")
        connections.tunnel_closed("ssh-0", holder.workspace_id, tunnels.TunnelEnd(by_endpoint=True))
        return ids


def _get(app: Flask, persona: Persona, q: str = "", **params: Any) -> Any:
    return app.test_client().get("/api/v2/connectionlog", query_string={"q": q, **params}, headers=persona.auth)


def test_the_api_filters_and_pages_in_coders_shape_for_owners_and_auditors_only(
    app: Flask, world: World, personas: dict[str, Persona]
) -> None:
    _seed(app, world)
    alice = personas["alice"]
    every = _get(app, alice)
    assert every.status_code == 200 and every.json["count"] == 6 and every.headers["X-Total-Count"] == "6"
    assert every.json["count_capped"] is False
    rows = every.json["connection_logs"]
    assert [row["type"] for row in rows] == ["ssh"] * 5 + ["workspace_app"]  # the newest first
    assert rows[-1]["web_info"]["slug_or_port"] == "code" and rows[-1]["web_info"]["user"]["username"] == "alice"
    assert rows[0]["ssh_info"]["connection_id"] == rows[0]["id"] and rows[0]["ip"] == BROWSER.ip
    assert _get(app, alice, "type:ssh").json["count"] == 5
    assert _get(app, alice, "username:alice").json["count"] == 1
    assert _get(app, alice, "carol type:ssh status:ongoing").json["count"] == 4
    completed = _get(app, alice, "status:completed").json["connection_logs"]
    assert [row["ssh_info"]["disconnect_reason"] for row in completed] == ["closed"]
    assert _get(app, alice, f"workspace_id:{world.workspace['id']} workspace_owner:carol").json["count"] == 6
    assert _get(app, alice, "connected_before:2000-01-01").json["count"] == 0
    assert _get(app, alice, "connected_after:2000-01-01T00:00:00Z").json["count"] == 6
    pages = [_get(app, alice, limit=4, offset=offset).json["connection_logs"] for offset in (0, 4)]
    assert [len(page) for page in pages] == [4, 2]
    assert {row["id"] for row in pages[0]} | {row["id"] for row in pages[1]} == {
        row["id"] for row in every.json["connection_logs"]
    }
    for bad in ("type:telnet", "status:maybe", "connected_after:yesterday", "colour:red"):
        refused = _get(app, alice, bad)
        assert refused.status_code == 400 and refused.json["validations"][0]["field"] == "q", bad

    # Auditors read it as owners do; nobody else does.
    with app.app_context():
        dave = db.session.scalar(select(User).where(User.username == "dave"))
        assert dave is not None
        dave.roles = ["auditor"]
        db.session.commit()
    assert _get(app, personas["dave"]).json["count"] == 6
    for persona in ("bob", "carol"):
        assert _get(app, personas[persona]).status_code == 403
    browser = app.test_client()
    sign_in(browser, "dave@example.com", PASSWORD)
    page = browser.get("/connectionlog?q=type:ssh")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert html.count('data-type="ssh"') == 5 and 'data-reason="closed"' in html
    assert browser.get("/connectionlog?q=type:telnet").status_code == 400
    carol = app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    assert carol.get("/connectionlog").status_code == 403


def test_retention_removes_connections_that_ended_before_it_and_keeps_recent_and_open_ones(
    app: Flask, world: World, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection log is kept as long as the audit log (the same ``--audit-retention``), in bounded batches."""
    ids = _seed(app, world)  # an open app session, ssh-0 ended, ssh-1..4 open
    now = utcnow()
    long_ago = now - timedelta(days=400)
    with app.app_context():
        ended_long_ago = ["ssh-1", "ssh-2", "ssh-3"]
        db.session.execute(
            update(ConnectionLog)
            .where(ConnectionLog.id.in_(ended_long_ago))
            .values(connect_time=long_ago, disconnect_time=long_ago + timedelta(hours=1), disconnect_reason="closed")
        )
        # Opened as long ago but still open: it stays, however old.
        db.session.execute(update(ConnectionLog).where(ConnectionLog.id == "ssh-4").values(connect_time=long_ago))
        db.session.commit()
        assert connlog.prune_old_connections(settings, now=now) == 0  # default: keep everything
        # Two a batch: the three old rows take two batches (and the loop stops at the short one).
        monkeypatch.setattr(connlog, "PRUNE_BATCH", 2)
        keep_a_year = dataclasses.replace(settings, audit_retention=365 * 86_400)
        assert connlog.prune_old_connections(keep_a_year, now=now) == 3
        kept = set(db.session.scalars(select(ConnectionLog.id)))
        assert kept == set(ids) - set(ended_long_ago)  # ssh-0 ended just now, the rest are open
        assert connlog.prune_old_connections(keep_a_year, now=now) == 0
    # The maintenance loop runs it beside the audit log's own retention.
    assert connlog.prune_old_connections in app.extensions["slipway_maintenance_tasks"]


@pytest.mark.parametrize(
    ("q", "index"),
    [
        ("workspace_owner:carol", "ix_connection_logs_workspace_owner_id_connect_time"),
        ("username:carol", "ix_connection_logs_user_id_connect_time"),
        ("", "ix_connection_logs_connect_time"),
    ],
)
def test_a_page_of_the_log_is_read_through_an_index(
    app: Flask, personas: dict[str, Persona], q: str, index: str
) -> None:
    """The filters that a year of connections makes slow are served by an index, newest first (the API's page)."""
    with app.app_context():
        shown = plan(log_query(q).limit(25))
        db.session.rollback()
    assert index in shown, shown
    # No scan of the table itself (SQLite walking the connect_time index in order, stopping at the page, is fine).
    assert "Seq Scan" not in shown and "SCAN connection_logs\n" not in shown + "\n", shown


def test_the_apis_count_stops_at_its_cap_and_says_so(
    app: Flask, world: World, personas: dict[str, Persona], monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(app, world)
    monkeypatch.setattr(connectionlog_api, "COUNT_CAP", 4)
    capped = _get(app, personas["alice"], limit=2)
    assert capped.json["count"] == 4 and capped.json["count_capped"] is True and capped.headers["X-Total-Count"] == "4"
    assert len(capped.json["connection_logs"]) == 2
    exact = _get(app, personas["alice"], "type:ssh status:ongoing").json  # 4 rows: at the cap, not past it
    assert exact["count"] == 4 and exact["count_capped"] is False
