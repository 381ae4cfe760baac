"""Who may see an agent and who may get into its workspace, checked when the agent is loaded."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from flask import current_app, request
from flask_login import current_user

from app.agents.apps import find_workspace
from app.agents.services import build_of, shown_agents
from app.auth.access import api_user, bearer_token, page_user
from app.core.columns import utcnow
from app.core.errors import Conflict, Forbidden, NotFound, Unauthorized
from app.core.extensions import db
from app.provisioning.models import SUCCEEDED
from app.resources.models import WorkspaceAgent
from app.resources.presenter import status_of
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import build_status, can_read, can_use, latest_build


@dataclass(frozen=True)
class AgentContext:
    agent: WorkspaceAgent
    build: WorkspaceBuild
    workspace: Workspace


def get_agent_for(user: User, agent_id: str, need: str = "read") -> AgentContext:
    """The agent, if ``user`` may ``read`` it (owner, admins, those it is shared with) or ``connect`` to it (whoever
    may use the workspace: its owner, deployment owners, those it is shared with; a way in is a shell as the
    workspace's owner, so template admins get none). Others get 404, as if it did not exist."""
    agent = db.session.get(WorkspaceAgent, agent_id)
    build = build_of(agent) if agent is not None else None
    if agent is None or build is None or build.workspace.deleted or not can_read(user, build.workspace):
        raise NotFound("No such workspace agent.")
    if need == "connect" and not can_use(user, build.workspace):
        raise Forbidden("Only the workspace's owner, a deployment owner or those it is shared with may connect to it.")
    return AgentContext(agent, build, build.workspace)


def workspace_at(user: User, owner_name: str, workspace_and_agent: str) -> Workspace:
    """The workspace of Coder's ``/@owner/workspace[.agent]`` URL, if ``user`` may read it; 404 otherwise, the same
    whether it does not exist or may not be seen."""
    workspace = find_workspace(owner_name, workspace_and_agent.partition(".")[0])
    if workspace is None or not can_read(user, workspace):
        raise NotFound("No such workspace.")
    return workspace


def agent_at(user: User, owner_name: str, workspace_and_agent: str, need: str = "read") -> AgentContext:
    """The agent of ``/@owner/workspace[.agent]``: the one named after the dot, or the workspace's only agent."""
    workspace = workspace_at(user, owner_name, workspace_and_agent)
    agent_name = workspace_and_agent.partition(".")[2]
    agents = [agent for agent, _ in shown_agents(workspace)]
    if agent_name:
        agents = [agent for agent in agents if agent.name.lower() == agent_name.lower()]
    if not agents:
        named = f" named {agent_name}" if agent_name else ""
        raise NotFound(f"Workspace {workspace.name} has no agent{named}.")
    if len(agents) > 1:
        names = ", ".join(sorted(agent.name for agent in agents))
        raise NotFound(
            f"Workspace {workspace.name} has several agents ({names}): name one, as {workspace.name}.<agent>."
        )
    return get_agent_for(user, agents[0].id, need)


# An agent that disconnected this recently is most likely reconnecting (its replica drained: it connects again at
# once, to another): a tunnel or app request waits this long for it before being refused.
RECONNECT_GRACE_SECONDS = 5.0


def ensure_reachable(context: AgentContext) -> None:
    """A clear 409 for every reason a tunnel cannot be opened now, saying what to do about it. An agent that has
    only just disconnected is waited for, briefly: a rolling restart must not fail the requests made while the
    agent moves to another replica."""
    deadline = time.monotonic() + RECONNECT_GRACE_SECONDS
    while True:
        try:
            _ensure_reachable(context)
            return
        except Conflict:
            agent = context.agent
            recent = (
                status_of(agent) == "disconnected"
                and agent.disconnected_at is not None
                and utcnow() - agent.disconnected_at < timedelta(seconds=RECONNECT_GRACE_SECONDS)
            )
            if not recent or time.monotonic() > deadline:
                raise
        db.session.rollback()  # no connection held while waiting; the rows are read afresh
        time.sleep(0.2)


def _ensure_reachable(context: AgentContext) -> None:
    workspace, name = context.workspace, context.workspace.name
    latest = latest_build(workspace)
    if latest.id != context.build.id:
        if latest.transition == "start" and latest.job.status == SUCCEEDED:
            raise Conflict(f"That agent belongs to an earlier build of {name}; look the workspace up again.")
        status = build_status(latest)
        raise Conflict(f"Workspace {name} is {status}: start it with `slipway start {name}`.")
    status = status_of(context.agent)
    if status != "connected":
        hint = {
            "connecting": "it has not connected yet; wait for the workspace to finish starting",
            "disconnected": "it lost its connection; the workspace may be stopping or its process died",
            "timeout": "it has not connected for too long; try `slipway stop` and `slipway start`",
        }.get(status, status)
        raise Conflict(f"The agent {context.agent.name} of {name} is {status}: {hint}.")


def tunnel_user() -> User:
    """A bearer token (CLI, scripts), else the dashboard's session cookie from a page of this site only: a
    WebSocket is not subject to the same-origin policy, so a foreign page must not ride the cookie."""
    if bearer_token() is not None:
        return api_user()
    if not current_user.is_authenticated:
        raise Unauthorized("You must be signed in: send Authorization: Bearer <token>.")
    origin = request.headers.get("Origin", "")
    allowed = {_origin(request.host_url), _origin(current_app.config["SLIPWAY_SETTINGS"].access_url)}
    if _origin(origin) not in allowed:
        raise Forbidden("This WebSocket may only be opened from Slipway's own pages.")
    return page_user()


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""
