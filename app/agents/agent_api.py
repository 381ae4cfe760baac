"""``/api/v2/workspaceagents/me/``: what agents call, authenticated by their token (agent/README.md)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, jsonify, request

from app.agents import services, tunnels
from app.agents.control import ControlConnection
from app.agents.manifest import build_manifest
from app.agents.models import WorkspaceAgent
from app.blueprints import API_PREFIX, json_body
from app.config import Settings
from app.errors import NotFound
from app.extensions import csrf, db
from app.limits import live_connection
from app.provisioning.streams import relay_for
from app.redis_client import get_redis
from app.websocket import WebSocket, serve_websocket

bp = Blueprint("agent_api", __name__, url_prefix=f"{API_PREFIX}/workspaceagents/me")
# Agents authenticate with their token header, never a cookie: forms on other sites cannot forge these calls.
csrf.exempt(bp)

TOKEN_HEADERS = ("Slipway-Agent-Token", "Coder-Session-Token")
# Script output arrives in batches of at most 1,000 lines (agent/README.md): allow their JSON overhead.
LOGS_BODY_LIMIT = 2 * 1024 * 1024


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


@bp.before_request
def authenticate_agent() -> None:
    token = next((request.headers[name] for name in TOKEN_HEADERS if request.headers.get(name)), "")
    g.agent = services.agent_for_token(token)


def _agent() -> WorkspaceAgent:
    agent: WorkspaceAgent = g.agent
    return agent


@bp.get("/manifest")
def manifest() -> Response:
    return jsonify(build_manifest(_agent()))


@bp.post("/startup")
def startup() -> tuple[str, int]:
    services.record_startup(_agent(), json_body())
    return "", 204


@bp.post("/lifecycle")
def lifecycle() -> tuple[str, int]:
    services.record_lifecycle(_agent(), json_body())
    return "", 204


@bp.post("/logs")
def logs() -> Response:
    request.max_content_length = LOGS_BODY_LIMIT
    return jsonify(services.append_logs(_agent(), json_body().get("logs")))


@bp.post("/metadata")
def metadata() -> tuple[str, int]:
    services.record_metadata(_agent(), json_body().get("metadata"))
    return "", 204


@bp.post("/app-health")
def app_health() -> tuple[str, int]:
    services.record_app_health(_agent(), json_body().get("healths"))
    return "", 204


@bp.get("/rpc", websocket=True)
def control() -> Response:
    agent_id, settings = _agent().id, _settings()
    db.session.remove()

    def run(websocket: WebSocket) -> None:
        ControlConnection(websocket, agent_id, relay_for(settings.redis_url), settings.agent_heartbeat_interval).serve()

    return serve_websocket(run, lifeline=True)


@bp.get("/tunnels/<tunnel_id>", websocket=True)
def tunnel(tunnel_id: str) -> Response:
    """The agent's half of a tunnel it was asked to dial (or the reason its dial failed)."""
    error = request.args.get("error", "")[:500] or None
    client = get_redis()
    if not tunnels.dialed_to(client, tunnel_id, _agent().id):
        raise NotFound("No tunnel with that id was dialed to this agent.")
    db.session.remove()
    with live_connection():  # before the user's half hears that this one is open
        half = tunnels.agent_half(client, tunnel_id, error)
        if error:
            return serve_websocket(lambda websocket: websocket.close(1000, "The dial failure was passed on."))
        return serve_websocket(lambda websocket: tunnels.relay(websocket, half))
