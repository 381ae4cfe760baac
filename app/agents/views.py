"""Agents on the dashboard: the live panel of a workspace's agent, its script logs, and the web terminal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from flask import current_app, jsonify, redirect, render_template, request, url_for
from markupsafe import Markup, escape
from werkzeug.wrappers import Response

from app.agents import port_sharing, ports, services
from app.agents.access import AgentContext, agent_at, get_agent_for, workspace_at
from app.agents.api import AgentLogView, read_agent_logs
from app.agents.apps import app_path, subdomain_url
from app.agents.models import CONNECTED, AgentConnectionEvent, AgentLog
from app.agents.ports import PortLink
from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.core.errors import Forbidden, NotFound
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.core.security_headers import allow_inline_styles
from app.core.signing import signer
from app.events import get_relay
from app.events.notices import publish_agent_notice
from app.events.relay import agent_key
from app.events.sse import event_stream, sse_event, stream_cursor
from app.events.streams import follow_lines
from app.resources.models import WorkspaceAgent
from app.resources.presenter import metadata_items, status_of, subdomain_unavailable_reason
from app.resources.status import agent_health
from app.users.models import User
from app.workspaces.models import Workspace
from app.workspaces.sections import WorkspaceSection
from app.workspaces.services import can_share, can_use
from protocol.codec import JSON, JsonObject

bp = page_blueprint("agents", __name__)

# The page shows the newest lines; the API (and the log files in the workspace) have them all.
PAGE_LOG_LINES = 2000


@dataclass(frozen=True)
class PanelApp:
    name: str
    path: str
    health: str
    share: str
    # Why the app cannot be opened (a subdomain app without a wildcard access URL); "" when it can.
    unavailable: str = ""
    # The app a coder_ai_task shows its task in (Coder's Tasks sidebar).
    ai_task: bool = False


@dataclass
class ConnectionSpan:
    """One control connection of an agent, from the kept events: None where the event fell out of the history
    (``started``) or has not happened (``ended``). ``superseded``: a newer connection took over without it closing."""

    started: datetime | None
    ended: datetime | None = None
    superseded: bool = False


# The panel shows the newest connections; the history keeps CONNECTION_HISTORY events.
PANEL_CONNECTIONS = 10


def connection_spans(events: Sequence[AgentConnectionEvent]) -> list[ConnectionSpan]:
    """The connections the events describe, newest first (``events`` newest first, as the history reads)."""
    spans: dict[str, ConnectionSpan] = {}
    for event in reversed(events):
        if event.event == CONNECTED:
            for earlier in spans.values():
                if earlier.ended is None:
                    earlier.superseded = True
            spans[event.connection_id] = ConnectionSpan(started=event.at)
        else:
            span = spans.setdefault(event.connection_id, ConnectionSpan(started=None))
            span.ended, span.superseded = event.at, False
    return list(reversed(spans.values()))[:PANEL_CONNECTIONS]


@dataclass
class AgentPanel:
    """What the workspace page shows of one agent."""

    agent: WorkspaceAgent
    workspace_id: str
    status: str
    healthy: bool
    health_reason: str
    can_connect: bool
    ssh_command: str
    # Whether the viewer may open ports to more people: the workspace's owner (or a deployment owner) alone.
    can_share: bool = False
    apps: list[PanelApp] = field(default_factory=list)
    ports: list[PortLink] = field(default_factory=list)
    # Each listed port's share level, and the levels its template lets the owner choose from.
    port_shares: dict[int, str] = field(default_factory=dict)
    share_levels: tuple[str, ...] = ()
    metadata: list[JsonObject] = field(default_factory=list)
    log_html: Markup = field(default_factory=Markup)
    last_log_id: int = 0
    connections: list[ConnectionSpan] = field(default_factory=list)


def agent_panel(context: AgentContext, user: User, *, with_logs: bool = True) -> AgentPanel:
    agent, workspace = context.agent, context.workspace
    status = status_of(agent)
    health = agent_health(agent, status)
    owner = workspace.owner.username
    can_connect = can_use(user, workspace)
    # Someone else's workspace (shared with them) is named with its owner, as `slipway ssh` takes it.
    named = workspace.name if user.id == workspace.owner_id else f"{owner}/{workspace.name}"
    panel = AgentPanel(
        agent=agent,
        workspace_id=workspace.id,
        status=status,
        healthy=health.healthy,
        health_reason=health.reason,
        can_connect=can_connect,
        can_share=can_share(user, workspace),
        ssh_command=f"slipway ssh {named}" if can_connect else "",
        metadata=metadata_items(agent),
        connections=connection_spans(services.connection_history(agent.id)),
    )
    panel.apps = [
        PanelApp(
            name=app.name,
            path=(
                (subdomain_url(owner, workspace.name, agent.name, app.slug) or "")
                if app.subdomain
                else app_path(owner, workspace.name, agent.name, app.slug)
            ),
            health=agent.app_health_of(app.slug),
            share=app.share,
            unavailable=subdomain_unavailable_reason() if app.subdomain else "",
            ai_task=app.ai_task,
        )
        for app in agent.apps
        if app.url and not app.external and not app.hidden
    ]
    listening = ports.listening_ports(get_redis(), signer(), agent.id) if status == "connected" else []
    path_apps = not current_app.config["SLIPWAY_SETTINGS"].disable_path_apps
    agent_shares = [share for share in port_sharing.port_shares(workspace) if share.agent_name == agent.name]
    https_ports = frozenset(share.port for share in agent_shares if share.protocol == "https")
    panel.ports = ports.port_links(
        listening, owner, workspace.name, agent.name, path_apps=path_apps, https_ports=https_ports
    )
    shares = {share.port: share.share_level for share in agent_shares}
    panel.port_shares = {port.port: shares.get(port.port, "owner") for port in panel.ports}
    panel.share_levels = port_sharing.levels_up_to(workspace)
    if with_logs:
        lines = services.agent_logs(agent.id)[-PAGE_LOG_LINES:]
        panel.log_html = AgentLogHtml(agent).render(lines)
        panel.last_log_id = lines[-1].id if lines else 0
    return panel


class AgentLogHtml:
    """Script output as HTML lines, each labelled with the script it came from."""

    def __init__(self, agent: WorkspaceAgent) -> None:
        self.sources = {source.id: source.display_name for source in agent.log_sources}

    def _source(self, line: AgentLog) -> str:
        return self.sources.get(line.source_id or "", "agent")

    def render(self, lines: Sequence[AgentLog]) -> Markup:
        return Markup(  # noqa: S704 - every value is escaped
            "".join(
                f'<div class="log-line level-{escape(line.level)}" data-id="{line.id}">'
                f'<span class="log-time">{line.created_at.strftime("%H:%M:%S")}</span>'
                f'<span class="log-text"><span class="log-source">{escape(self._source(line))}</span>'
                f"{escape(line.output)}</span></div>"
                for line in lines
            )
        )


class AgentLogHtmlRenderer:
    """The panel's stream: `log` events append lines; `end` when the agent is no longer current."""

    def __init__(self, html: AgentLogHtml) -> None:
        self.html = html
        self.placeholder_removed = False

    def update(self, view: AgentLogView, lines: Sequence[AgentLog]) -> Iterator[str]:
        if not lines:
            return
        parts = []
        if not self.placeholder_removed:
            parts.append(f'<div id="agent-{view.agent.id}-log-empty" hx-swap-oob="delete"></div>')
        self.placeholder_removed = True
        parts.append(self.html.render(lines))
        yield sse_event("log", "".join(parts), lines[-1].id)

    def end(self, view: AgentLogView) -> Iterator[str]:
        yield sse_event("end", '<span class="muted small">This agent has stopped.</span>')


def _context(workspace_id: str, agent_id: str, need: str = "read") -> AgentContext:
    context = get_agent_for(page_user(), agent_id, need)
    if context.workspace.id != workspace_id:
        raise NotFound("No such workspace agent.")
    return context


@bp.get("/workspaces/<workspace_id>/agents/<agent_id>/panel")
def panel(workspace_id: str, agent_id: str) -> str:
    """The live part of the panel (status, apps, metadata), re-read when the page's stream says it changed."""
    context = _context(workspace_id, agent_id)
    return render_template("agents/_partials/live.html", panel=agent_panel(context, page_user(), with_logs=False))


@bp.post("/workspaces/<workspace_id>/agents/<agent_id>/ports/<int:port>/share")
def share_port(workspace_id: str, agent_id: str, port: int) -> Response:
    """The panel's share control: the same rules as POST /api/v2/workspaces/{id}/port-share; owner unshares."""
    context = _context(workspace_id, agent_id, need="connect")
    if not can_share(page_user(), context.workspace):  # a share never hands on more sharing
        raise Forbidden("Only the workspace's owner (or a deployment owner) may share its ports.")
    level = request.form.get("share_level", "")
    if level == "owner":
        with contextlib.suppress(NotFound):  # not shared: nothing to undo
            port_sharing.unshare_port(context.workspace, context.agent.name, port)
    else:
        body: dict[str, JSON] = {"agent_name": context.agent.name, "port": port, "share_level": level}
        port_sharing.share_port(context.workspace, port_sharing.parse_share_request(body))
    publish_agent_notice(context.agent.id)
    return redirect(url_for("workspaces.show", workspace_id=workspace_id))


@bp.get("/workspaces/<workspace_id>/agents/<agent_id>/logs/stream")
def log_stream(workspace_id: str, agent_id: str) -> Response:
    context = _context(workspace_id, agent_id)
    relay = get_relay()
    cursor = stream_cursor(request.args.get("after"), request.headers.get("Last-Event-ID"))
    agent = context.agent.id
    stream = follow_lines(
        relay,
        agent_key(agent),
        cursor,
        lambda since: read_agent_logs(agent, since),
        lambda view: not view.current,
        AgentLogHtmlRenderer(AgentLogHtml(context.agent)),
    )
    return event_stream(stream)


@bp.get("/workspaces/<workspace_id>/agents/<agent_id>/terminal")
def terminal(workspace_id: str, agent_id: str) -> str:
    context = _context(workspace_id, agent_id, need="connect")
    allow_inline_styles()  # xterm.js's renderer sizes and colours the terminal with <style> elements it adds
    # Werkzeug builds WebSocket rules as absolute ws:// URLs; the page picks ws or wss from its own address.
    socket_path = urlsplit(url_for("agents_api.tunnel", agent_id=agent_id)).path
    return render_template(
        "agents/terminal.html", context=context, socket_path=socket_path, status=status_of(context.agent)
    )


@bp.get("/workspaces/<workspace_id>/agents/<agent_id>/terminal/current")
def terminal_current(workspace_id: str, agent_id: str) -> Response:
    """Where an open terminal goes when its socket closes: a rebuild (update, restart) replaces the workspace's
    agent with a new one, and the page asks for the agent now serving the workspace under the same name (or
    its only agent), to reconnect to it once connected. ``agent``: null while the workspace has none (stopped,
    failed, a build running)."""
    context = _context(workspace_id, agent_id, need="connect")
    current = services.shown_agents(context.workspace)
    named = [agent for agent, _ in current if agent.name == context.agent.name]
    successor = named[0] if named else current[0][0] if len(current) == 1 else None
    agent: JsonObject | None = None
    if successor is not None:
        agent = {
            "id": successor.id,
            "name": successor.name,
            "status": status_of(successor),
            "terminal_url": url_for("agents.terminal", workspace_id=workspace_id, agent_id=successor.id),
            "socket_path": urlsplit(url_for("agents_api.tunnel", agent_id=successor.id)).path,
        }
    return jsonify({"agent": agent})


# Coder's URLs: a workspace (and its agent) by its owner's and its own name, as people link to them.
@bp.get("/@<owner>/<workspace_and_agent>")
def workspace_by_name(owner: str, workspace_and_agent: str) -> Response:
    workspace = workspace_at(page_user(), owner, workspace_and_agent)
    return redirect(url_for("workspaces.show", workspace_id=workspace.id))


@bp.get("/@<owner>/<workspace_and_agent>/terminal")
def terminal_by_name(owner: str, workspace_and_agent: str) -> Response:
    context = agent_at(page_user(), owner, workspace_and_agent, need="connect")
    # The terminal's own query (?session=, ?command=) carries over.
    target = url_for("agents.terminal", workspace_id=context.workspace.id, agent_id=context.agent.id)
    query = request.query_string.decode("latin-1")
    return redirect(f"{target}?{query}" if query else target)


def _render_agent_panels(workspace: Workspace, user: User) -> Markup:
    panels = [
        agent_panel(AgentContext(agent, build, workspace), user) for agent, build in services.shown_agents(workspace)
    ]
    # The panels' HTML is the template's (escaped there): joined as it is, not escaped again.
    return Markup("".join(render_template("agents/_partials/panel.html", panel=panel) for panel in panels))  # noqa: S704


def _agent_states(workspace_id: str) -> dict[str, tuple[object, ...]]:
    workspace = db.session.get(Workspace, workspace_id)
    agents = [agent for agent, _ in services.shown_agents(workspace)] if workspace is not None else []
    return {
        agent.id: (status_of(agent), agent.lifecycle_state, agent.version, agent.expanded_directory,
                   _shown_metadata(agent.metadata_results), repr(agent.app_health),
                   repr(ports.listening_ports(get_redis(), signer(), agent.id)))
        for agent in agents
    }  # fmt: skip


def _shown_metadata(results: dict[str, dict[str, str]]) -> tuple[tuple[str, str, str, bool], ...]:
    """What the panel shows of each result: not when it was collected, which changes with every report even when
    the value does not (a redraw replaces the whole panel, and with it whatever the reader had selected)."""
    return tuple(
        (key, str(result.get("value", "")), str(result.get("error", "")), bool(result.get("collected_at")))
        for key, result in sorted(results.items())
    )


def _agent_keys(states: object) -> list[str]:
    return [agent_key(agent_id) for agent_id in states] if isinstance(states, dict) else []


# A panel per agent on the workspace's page; the page's stream sends `agents` when one changes (connection,
# lifecycle, metadata, app health), and watches each shown agent's notices.
AGENTS_SECTION = WorkspaceSection(
    event="agents", render=_render_agent_panels, live_state=_agent_states, watch_keys=_agent_keys
)
