"""Open ways into workspaces (SSH, terminals, port forwards, apps) that a change of access no longer allows are
closed at once: the watcher :func:`close_lost` re-checks each open tunnel's holder against the same rule that let
them in (``can_use``, app/workspaces/services.py) and closes those it now refuses, on whichever replica holds
them (tunnels are Redis lists: a close frame pushed here is read there).

And what the connection log (app/connectionlog) hears of them: a tunnel's row opens when the agent answers and ends
with the reason its relay stopped; :func:`sweep_connection_log` (the maintenance loop) ends the rows of tunnels whose
replica died, of app sessions gone idle, and of workspaces no longer running."""

from __future__ import annotations

import logging
from datetime import timedelta

from flask import request
from redis import Redis

from app.agents import tunnels
from app.agents.apps import AppTarget
from app.connectionlog import services as connlog
from app.connectionlog.models import (
    REASON_ACCESS_REMOVED,
    REASON_CLOSED,
    REASON_LOST,
    REASON_TIMED_OUT,
    REASON_WORKSPACE_STOPPED,
    TYPE_PORT_FORWARDING,
    TYPE_SSH,
    TYPE_TERMINAL,
    TYPE_WORKSPACE_APP,
    VIA_HTTP,
)
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import can_use
from protocol.agentapi import CLOSE_ACCESS_REVOKED

# A tunnel's user half beats every ALIVE_EVERY_SECONDS and its key lives ALIVE_TTL_SECONDS: a row whose key is gone
# this long after it opened has no live holder.
HOLDER_GRACE = timedelta(seconds=tunnels.ALIVE_TTL_SECONDS)

log = logging.getLogger(__name__)

REVOKED_REASON = "Your access to this workspace was removed."


def close_lost(workspace_id: str | None, user_id: str | None) -> None:
    """Close the tunnels of ``workspace_id`` (every holder's, or ``user_id``'s), or of every workspace
    ``user_id`` holds tunnels into, whose holder may no longer use the workspace."""
    client = get_redis()
    workspace_ids = [workspace_id] if workspace_id else tunnels.held_workspaces(client, user_id or "")
    for one in workspace_ids:
        workspace = db.session.get(Workspace, one)
        for tunnel_id, holder_id in tunnels.open_tunnels(client, one).items():
            if user_id is not None and holder_id != user_id:
                continue
            holder = db.session.get(User, holder_id)
            if (
                workspace is None
                or workspace.deleted
                or holder is None
                or not holder.is_active
                or not can_use(holder, workspace)
            ):
                log.info("closing tunnel %s of %s into workspace %s: access removed", tunnel_id, holder_id, one)
                tunnels.close_tunnel(client, tunnel_id, one, CLOSE_ACCESS_REVOKED, REVOKED_REASON)
    _end_lost_app_sessions(workspace_id, user_id)


def _end_lost_app_sessions(workspace_id: str | None, user_id: str | None) -> None:
    """App sessions hold no tunnel between requests (the next request is refused): their rows end here."""
    for row in connlog.open_rows(workspace_id=workspace_id, user_id=user_id, via=VIA_HTTP):
        if row.user_id is None:
            continue  # a public app's signed-out visitor had no access to lose
        holder = db.session.get(User, row.user_id)
        workspace = db.session.get(Workspace, row.workspace_id)
        if workspace is None or workspace.deleted or holder is None or not holder.is_active:
            connlog.end_connection(row.id, REASON_ACCESS_REMOVED)
        elif not can_use(holder, workspace):
            connlog.end_connection(row.id, REASON_ACCESS_REMOVED)


def request_origin() -> connlog.Origin:
    return connlog.Origin(ip=request.remote_addr or "", user_agent=request.headers.get("User-Agent", ""))


def app_used(client: Redis, person: User | None, target: AppTarget) -> None:
    """Each app request keeps its viewer's session of the app open in the connection log (a port reached through
    its own host is a port forward, as Coder logs it). Called with the request's session removed, ``target`` and
    ``person`` detached: it writes in a session of its own."""
    kind = TYPE_PORT_FORWARDING if target.slug.isdecimal() else TYPE_WORKSPACE_APP
    way = connlog.Way(kind, target.agent.name, target.slug, via=VIA_HTTP)
    app_key = f"{target.agent.id}/{target.slug}"
    try:
        connlog.touch_app_session(client, person, target.workspace, way, request_origin(), app_key)
    finally:
        db.session.remove()  # the request's session ended before this call; so does this one


def tunnel_way(wanted: tunnels.DialRequest, agent_name: str) -> connlog.Way:
    if wanted.service == "ssh":
        return connlog.Way(TYPE_SSH, agent_name)
    if wanted.service == "tcp":
        return connlog.Way(TYPE_PORT_FORWARDING, agent_name, str(wanted.port))
    return connlog.Way(TYPE_TERMINAL, agent_name)


def tunnel_opened(tunnel_id: str, holder: tunnels.Holder, way: connlog.Way, origin: connlog.Origin) -> None:
    """The row of a tunnel the agent has answered (its id is the tunnel's: the sweep asks Redis whether its holder
    still beats). Written in a session of its own, released at once: the tunnel may stay open for hours."""
    try:
        workspace = db.session.get(Workspace, holder.workspace_id)
        if workspace is not None:
            connlog.open_connection(db.session.get(User, holder.user_id), workspace, way, origin, tunnel_id)
    finally:
        db.session.remove()


def tunnel_closed(tunnel_id: str, workspace_id: str, end: tunnels.TunnelEnd) -> None:
    try:
        connlog.end_connection(tunnel_id, end_reason(end, workspace_id))
    finally:
        db.session.remove()


def end_reason(end: tunnels.TunnelEnd, workspace_id: str) -> str:
    """Why a tunnel ended: its user closed it (or the program inside exited), access was taken away, the workspace
    stopped under it, or the other side went silent."""
    if end.peer_code == CLOSE_ACCESS_REVOKED:
        return REASON_ACCESS_REMOVED
    if end.by_endpoint:
        return REASON_CLOSED
    if not workspace_running(workspace_id):
        return REASON_WORKSPACE_STOPPED
    return REASON_TIMED_OUT if end.broken else REASON_CLOSED


def workspace_running(workspace_id: str) -> bool:
    """Is the workspace meant to be up: its latest build a start (a stop or delete, even one still running, means
    its connections are going away for that reason)?"""
    workspace = db.session.get(Workspace, workspace_id)
    if workspace is None or workspace.deleted or workspace.latest_build_id is None:
        return False
    build = db.session.get(WorkspaceBuild, workspace.latest_build_id)
    return build is not None and build.transition == "start"


def sweep_connection_log(settings: Settings) -> int:
    """A maintenance task: end tunnel rows whose holder no longer beats (its replica died: "lost"), app sessions
    idle past their window ("timed out"), and app sessions into workspaces no longer running. How many ended."""
    rows = connlog.open_tunnel_rows(utcnow() - HOLDER_GRACE)
    alive = tunnels.alive_user_halves(get_redis(), [row.id for row in rows])
    ended = connlog.end_many((row.id for row in rows if row.id not in alive), REASON_LOST)
    ended += connlog.end_idle_app_sessions()
    stopped = [row.id for row in connlog.open_rows(via=VIA_HTTP) if not workspace_running(row.workspace_id)]
    return ended + connlog.end_many(stopped, REASON_WORKSPACE_STOPPED)
