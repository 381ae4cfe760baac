"""``/api/v2/workspaceagents/me/``: what agents call, authenticated by their token (agent/README.md)."""

from __future__ import annotations

from functools import partial

from flask import Blueprint, Response, current_app, g, request

from app.agents import handover, ports, services, tunnels
from app.agents.control import ControlConnection
from app.agents.manifest import build_manifest
from app.core.config import Settings
from app.core.errors import Conflict, Forbidden, NotFound, ServiceUnavailable, Unauthorized
from app.core.extensions import csrf, db
from app.core.limits import agent_budget, live_connection, person_budgets, replica_draining
from app.core.redis_client import get_redis
from app.core.signing import signer
from app.core.validation import message_body
from app.core.websocket import WebSocket, serve_websocket
from app.events import get_relay
from app.externalauth import services as external_auth_services
from app.resources.models import WorkspaceAgent
from app.users.models import User
from protocol.agentapi import (
    API_PREFIX,
    TOKEN_HEADERS,
    AgentLogBatch,
    AppHealthReport,
    GitSSHKeyReply,
    LifecycleReport,
    ListeningPortsReport,
    MetadataReport,
    Startup,
)
from protocol.codec import Message
from protocol.timings import ScriptTiming

bp = Blueprint("agent_api", __name__, url_prefix=API_PREFIX)
# Agents authenticate with their token header, never a cookie: forms on other sites cannot forge these calls.
csrf.exempt(bp)
# Script output arrives in batches of at most 1,000 lines (agent/README.md): allow their JSON overhead.
LOGS_BODY_LIMIT = 2 * 1024 * 1024


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


@bp.before_request
def authenticate_agent() -> None:
    token = next((request.headers[name] for name in TOKEN_HEADERS if request.headers.get(name)), "")
    try:
        g.agent = services.agent_for_token(token)
    except Unauthorized:
        # A claimed prebuild's agent that lost its control connection before it was handed its new token: the
        # control connection is the one way in its old token still has, to be handed the new one.
        waiting = handover.agent_awaiting_token(token) if request.endpoint == "agent_api.control" else None
        if waiting is None:
            raise
        g.agent = waiting


def _agent() -> WorkspaceAgent:
    agent: WorkspaceAgent = g.agent
    return agent


def _reply(message: Message) -> Response:
    return Response(message.dumps(), mimetype="application/json")


@bp.get("/manifest")
def manifest() -> Response:
    return _reply(build_manifest(_agent()))


@bp.post("/startup")
def startup() -> tuple[str, int]:
    services.record_startup(_agent(), message_body(Startup))
    return "", 204


@bp.post("/lifecycle")
def lifecycle() -> tuple[str, int]:
    services.record_lifecycle(_agent(), message_body(LifecycleReport))
    return "", 204


@bp.post("/script-timings")
def script_timings() -> tuple[str, int]:
    services.record_script_timing(_agent(), message_body(ScriptTiming))
    return "", 204


@bp.post("/logs")
def logs() -> Response:
    request.max_content_length = LOGS_BODY_LIMIT
    return _reply(services.append_logs(_agent(), message_body(AgentLogBatch)))


@bp.post("/metadata")
def metadata() -> tuple[str, int]:
    services.record_metadata(_agent(), message_body(MetadataReport))
    return "", 204


@bp.post("/app-health")
def app_health() -> tuple[str, int]:
    services.record_app_health(_agent(), message_body(AppHealthReport))
    return "", 204


@bp.post("/listening-ports")
def listening_ports() -> tuple[str, int]:
    ports.record_listening_ports(get_redis(), signer(), _agent().id, message_body(ListeningPortsReport))
    return "", 204


def _owner() -> User:
    build = services.build_of(_agent())
    if build is None:
        raise NotFound("This agent's build is gone.")
    owner: User = build.workspace.owner
    if not owner.is_active:
        # A suspended person's workspace keeps running until stopped, but hands out none of their credentials.
        raise Forbidden("The workspace owner's account is suspended.")
    return owner


@bp.get("/external-auth")
def external_auth() -> Response:
    """A token for the workspace's git (GIT_ASKPASS): the workspace owner's own, never anyone else's.

    With ``listen`` the request is a long poll (up to a minute): it holds a live slot like a stream, in the agent's
    budget and in its owner's, so one person's scripts cannot hold every web worker's connections (429 beyond)."""
    owner = _owner()
    listen = request.args.get("listen", "").lower() in ("1", "true", "yes")

    def answer() -> Response:
        return _reply(
            external_auth_services.agent_token(
                owner,
                match=request.args.get("match", "")[:2048],
                provider_id=request.args.get("id", "")[:64],
                listen=listen,
            )
        )

    if not listen:
        return answer()
    settings = _settings()
    with live_connection(budgets=[agent_budget(settings, _agent().id), *person_budgets(settings, owner.id)]):
        return answer()


@bp.get("/gitsshkey")
def git_ssh_key() -> Response:
    key = external_auth_services.git_ssh_key(_owner())
    return _reply(GitSSHKeyReply(public_key=key.public_key, private_key=key.private_key))


@bp.get("/rpc", websocket=True)
def control() -> Response:
    draining = replica_draining()
    if draining():  # before the upgrade: the agent retries soon, and a proxy tries another replica (503)
        raise ServiceUnavailable("This server is restarting; connect again (to another replica).")
    agent_id, settings, relay, client = _agent().id, _settings(), get_relay(), get_redis()
    db.session.remove()

    def run(websocket: WebSocket) -> None:
        heartbeat, key = settings.agent_heartbeat_interval, settings.secret_key
        pending = partial(tunnels.pending_dials, client, agent_id)
        ControlConnection(websocket, agent_id, relay, heartbeat, key, draining, pending).serve()

    return serve_websocket(run, lifeline=True)


@bp.get("/tunnels/<tunnel_id>", websocket=True)
def tunnel(tunnel_id: str) -> Response:
    """The agent's half of a tunnel it was asked to dial (or the reason its dial failed)."""
    error = request.args.get("error", "")[:500] or None
    if replica_draining()():  # it would end at once: a proxy takes it to a replica that stays (503 before the upgrade)
        raise ServiceUnavailable("This server is restarting; connect again (to another replica).")
    client = get_redis()
    if not tunnels.dialed_to(client, signer(), tunnel_id, _agent().id):
        raise NotFound("No tunnel with that id was dialed to this agent.")
    if not tunnels.take_agent_half(client, tunnel_id):
        raise Conflict("This tunnel's dial was already answered.")
    db.session.remove()
    with live_connection():  # before the user's half hears that this one is open
        half = tunnels.agent_half(client, tunnel_id, error)
        if error:
            return serve_websocket(lambda websocket: websocket.close(1000, "The dial failure was passed on."))

        draining = replica_draining()

        def run(websocket: WebSocket) -> None:
            tunnels.relay(websocket, half, draining)  # the agent's end: the user's half logs the connection

        return serve_websocket(run)
