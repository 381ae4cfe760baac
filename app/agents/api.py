"""Agents for users (API.md additions): an agent, its script logs, and tunnels into its workspace."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from flask import Response, jsonify, request
from werkzeug.datastructures import MultiDict

from app.agents import connections, port_sharing, ports, services, tunnels
from app.agents.access import ensure_reachable, get_agent_for, tunnel_user
from app.agents.models import AgentLog
from app.agents.tunnels import DialRequest
from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.connectionlog.services import Way
from app.core.errors import InvalidInput, ServiceUnavailable
from app.core.extensions import db
from app.core.limits import live_connection, replica_draining
from app.core.redis_client import get_redis
from app.core.signing import signer
from app.core.validation import json_body
from app.core.websocket import WebSocket, serve_websocket
from app.events import get_relay
from app.events.relay import agent_key
from app.events.sse import event_stream, log_cursor, sse_event, stream_cursor
from app.events.streams import follow_lines, line_event
from app.lifecycle import activity
from app.resources.models import WorkspaceAgent
from app.resources.presenter import agent_json
from app.workspaces.services import can_act, get_workspace_for
from protocol.values import parse_int

# The tunnel authenticates itself: a bearer token, or the dashboard's cookie (the web terminal).
bp = api_blueprint("agents_api", __name__, public=["tunnel"])

SERVICES = ("tcp", "ssh", "pty")
MAX_COMMAND_CHARS = 4096


@bp.get("/workspaceagents/<agent_id>")
def get_agent(agent_id: str) -> Response:
    user = api_user()
    context = get_agent_for(user, agent_id)
    # The scripts' text only for whom may act on the workspace: a template may have written the owner's tokens
    # into it, and template admins read every workspace.
    return jsonify(agent_json(context.agent, script_text=can_act(user, context.workspace)))


@bp.get("/workspaceagents/<agent_id>/listening-ports")
def listening_ports(agent_id: str) -> Response:
    """Coder's shape: the ports the agent last reported (none while it is not reporting)."""
    context = get_agent_for(api_user(), agent_id)
    found = ports.listening_ports(get_redis(), signer(), context.agent.id)
    return jsonify({"err": "", "ports": [port.to_json() for port in found]})


@bp.post("/workspaces/<workspace_id>/port-share")
def share_port(workspace_id: str) -> Response:
    """Coder's upsert of a port's share; the workspace's owner (or a deployment owner) only."""
    workspace = get_workspace_for(api_user(), workspace_id, need="share")
    share = port_sharing.share_port(workspace, port_sharing.parse_share_request(json_body()))
    return jsonify(share.to_json())


@bp.get("/workspaces/<workspace_id>/port-share")
def list_port_shares(workspace_id: str) -> Response:
    workspace = get_workspace_for(api_user(), workspace_id)
    return jsonify({"shares": [share.to_json() for share in port_sharing.port_shares(workspace)]})


@bp.delete("/workspaces/<workspace_id>/port-share")
def unshare_port(workspace_id: str) -> tuple[str, int]:
    workspace = get_workspace_for(api_user(), workspace_id, need="share")
    wanted = port_sharing.parse_share_request(json_body(), with_level=False)
    port_sharing.unshare_port(workspace, wanted.agent_name, wanted.port)
    return "", 204


@dataclass(frozen=True)
class AgentLogView:
    agent: WorkspaceAgent
    current: bool


class AgentJsonRenderer:
    """The agent's script output as API.md's log stream: `log` events, then `end` once the agent is outdated."""

    def update(self, view: AgentLogView, lines: Sequence[AgentLog]) -> Iterator[str]:
        if lines:
            yield "".join(line_event(line) for line in lines)

    def end(self, view: AgentLogView) -> Iterator[str]:
        yield sse_event("end", json.dumps({"status": "outdated", "lifecycle_state": view.agent.lifecycle_state}))


def read_agent_logs(agent_id: str, since: int) -> tuple[AgentLogView | None, list[AgentLog]]:
    agent = db.session.get(WorkspaceAgent, agent_id, populate_existing=True)
    if agent is None:
        return None, []
    return AgentLogView(agent, services.agent_is_current(agent_id)), services.agent_logs(agent_id, since)


@bp.get("/workspaceagents/<agent_id>/connections")
def agent_connections(agent_id: str) -> Response:
    """The agent's control connection events (``connected``, ``disconnected``), newest first: the kept history."""
    agent = get_agent_for(api_user(), agent_id).agent
    return jsonify([event.to_json() for event in services.connection_history(agent.id)])


@bp.get("/workspaceagents/<agent_id>/logs")
def agent_logs(agent_id: str) -> Response:
    """The lines after ``?after=`` as JSON, or with ``follow=true`` a live SSE stream (as for build logs)."""
    agent = get_agent_for(api_user(), agent_id).agent
    after = log_cursor(request.args.get("after", "0"))
    if request.args.get("follow", "").lower() not in ("true", "1"):
        return jsonify([line.to_json() for line in services.agent_logs(agent.id, after)])
    relay = get_relay()
    cursor = stream_cursor(request.args.get("after"), request.headers.get("Last-Event-ID"))
    stream = follow_lines(
        relay,
        agent_key(agent.id),
        cursor,
        lambda since: read_agent_logs(agent.id, since),
        lambda view: not view.current,
        AgentJsonRenderer(),
    )
    return event_stream(stream)


def dial_request(args: MultiDict[str, str]) -> DialRequest:
    """What to ask the agent to dial, from the query string (agent/README.md "Tunnels")."""
    service = args.get("service", "")
    if service == "ssh":
        return DialRequest(service="ssh")
    if service == "tcp":
        try:
            return DialRequest(service="tcp", port=parse_int(args.get("port", ""), minimum=1, maximum=65535))
        except ValueError:
            raise InvalidInput("port must be a TCP port number (1-65535).") from None
    if service != "pty":
        raise InvalidInput(f"service must be one of {', '.join(SERVICES)}.")
    try:
        rows = parse_int(args.get("rows", "24"), minimum=1, maximum=1000)
        cols = parse_int(args.get("cols", "80"), minimum=1, maximum=1000)
    except ValueError:
        raise InvalidInput("rows and cols must be whole numbers from 1 to 1000.") from None
    command = args.get("command", "")
    if len(command) > MAX_COMMAND_CHARS:
        raise InvalidInput(f"command is longer than {MAX_COMMAND_CHARS} characters.")
    reconnect = args.get("reconnect", "")
    if reconnect:
        try:
            reconnect = str(uuid.UUID(reconnect))
        except ValueError:
            raise InvalidInput("reconnect must be a UUID (the terminal session's id).") from None
    return DialRequest(service="pty", rows=rows, cols=cols, command=command, reconnect=reconnect)


@bp.get("/workspaceagents/<agent_id>/tunnel", websocket=True)
def tunnel(agent_id: str) -> Response:
    """A byte stream to the agent: SSH, a TCP port inside the workspace, or a terminal."""
    user = tunnel_user()
    context = get_agent_for(user, agent_id, need="connect")
    wanted = dial_request(request.args)
    ensure_reachable(context)
    if wanted.reconnect:  # scoped to this user and agent, and only for a connection authorized above
        key = tunnels.terminal_session_key(signer(), user.id, context.agent.id, wanted.reconnect)
        wanted = replace(wanted, reconnect=key)
    way = connections.tunnel_way(wanted, context.agent.name)
    return open_tunnel(context.agent.id, tunnels.Holder(user.id, context.workspace.id), wanted, way)


def open_tunnel(agent_id: str, holder: tunnels.Holder, wanted: DialRequest, way: Way) -> Response:
    """Dial, then serve the request's WebSocket as the user's half (SSH, port forwards and the web terminal alike:
    while it is open, the workspace counts as used). The connection log has it from the agent's answer to its
    end."""
    draining = replica_draining()
    if draining():  # it would end at once: a proxy takes it to a replica that stays (503 before the upgrade)
        raise ServiceUnavailable("This server is restarting; connect again (to another replica).")
    client, signing = get_redis(), signer()
    origin = connections.request_origin()
    db.session.remove()  # a tunnel may stay open for hours: hold no database connection
    with live_connection():  # before dialing: a refused tunnel must not have the agent dial back
        half = tunnels.dial(client, signing, agent_id, wanted, holder)

        def run(websocket: WebSocket) -> None:
            failure = tunnels.wait_open(half)
            if failure is not None:
                websocket.close(*failure)
                return
            connections.tunnel_opened(half.tunnel_id, holder, way, origin)
            end = tunnels.TunnelEnd(broken=True)
            try:
                with activity.open_connection(holder.workspace_id, client):
                    end = tunnels.relay(websocket, half, draining)
            finally:
                connections.tunnel_closed(half.tunnel_id, holder.workspace_id, end)

        return serve_websocket(run)
