"""Who may open a workspace's listening ports: its owner, unless the owner shared the port further (Coder's port
sharing), never beyond the template's ``max_port_share_level``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from sqlalchemy import delete, func, select

from app.agents.models import WorkspacePortShare
from app.catalog.models import Template
from app.core.errors import InvalidInput, NotFound
from app.core.extensions import db
from app.core.validation import FieldErrors
from app.resources.services import job_resources
from app.workspaces.models import Workspace
from app.workspaces.services import latest_build
from protocol.codec import JSON
from protocol.resources import SHARE_LEVELS, ShareLevel

PROTOCOLS = ("http", "https")


@dataclass(frozen=True)
class PortShareRequest:
    agent_name: str
    port: int
    share_level: ShareLevel
    protocol: str


def narrower(one: ShareLevel, other: ShareLevel) -> ShareLevel:
    return one if SHARE_LEVELS.index(one) <= SHARE_LEVELS.index(other) else other


def check_share_level(errors: FieldErrors, name: str, value: JSON) -> ShareLevel | None:
    if value not in SHARE_LEVELS:
        errors.add(name, "Must be owner, authenticated or public.")
        return None
    return value


def parse_share_request(body: Mapping[str, JSON], *, with_level: bool = True) -> PortShareRequest:
    errors = FieldErrors()
    agent_name, port = body.get("agent_name"), body.get("port")
    if not isinstance(agent_name, str) or not agent_name:
        errors.add("agent_name", "Name the workspace's agent the port is on.")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        errors.add("port", "Must be a TCP port (1-65535).")
    level = check_share_level(errors, "share_level", body.get("share_level")) if with_level else "owner"
    protocol = body.get("protocol", "http")
    if protocol not in PROTOCOLS:
        errors.add("protocol", "Must be http or https.")
    errors.raise_if_any("The port share is invalid.")
    return PortShareRequest(str(agent_name), cast(int, port), level or "owner", str(protocol))


def share_port(workspace: Workspace, wanted: PortShareRequest) -> WorkspacePortShare:
    """Create or change the share of one port; the caller has checked that the person may act on the workspace."""
    agent_name = _agent_name(workspace, wanted.agent_name)
    widest = _max_level(workspace)
    if narrower(wanted.share_level, widest) != wanted.share_level:
        raise InvalidInput(
            f"Template {workspace.template.name} lets ports be shared at most at the level {widest!r}.",
            validations=[{"field": "share_level", "detail": f"At most {widest}."}],
        )
    share = _find(workspace.id, agent_name, wanted.port)
    if share is None:
        share = WorkspacePortShare(workspace_id=workspace.id, agent_name=agent_name, port=wanted.port)
        db.session.add(share)
    share.share_level, share.protocol = wanted.share_level, wanted.protocol
    db.session.commit()
    return share


def unshare_port(workspace: Workspace, agent_name: str, port: int) -> None:
    gone = db.session.execute(
        delete(WorkspacePortShare).where(
            WorkspacePortShare.workspace_id == workspace.id,
            func.lower(WorkspacePortShare.agent_name) == agent_name.lower(),
            WorkspacePortShare.port == port,
        )
    )
    db.session.commit()
    if not getattr(gone, "rowcount", 0):
        raise NotFound(f"Port {port} of agent {agent_name} is not shared.")


def port_shares(workspace: Workspace) -> list[WorkspacePortShare]:
    """The workspace's shares, each at the level it has now (the template's cap applied)."""
    shares = db.session.scalars(
        select(WorkspacePortShare)
        .where(WorkspacePortShare.workspace_id == workspace.id)
        .order_by(WorkspacePortShare.agent_name, WorkspacePortShare.port)
    ).all()
    widest = _max_level(workspace)
    for share in shares:
        db.session.expunge(share)  # the capped level is for the reader, never written back
        share.share_level = narrower(cast(ShareLevel, share.share_level), widest)
    return list(shares)


def port_share_level(workspace_id: str, agent_name: str, port: int) -> ShareLevel:
    """Who may open this port now: its share, capped by the template's level ("owner" when not shared)."""
    row = db.session.execute(
        select(WorkspacePortShare.share_level, Template.max_port_share_level)
        .join(Workspace, Workspace.id == WorkspacePortShare.workspace_id)
        .join(Template, Template.id == Workspace.template_id)
        .where(
            WorkspacePortShare.workspace_id == workspace_id,
            func.lower(WorkspacePortShare.agent_name) == agent_name.lower(),
            WorkspacePortShare.port == port,
        )
    ).first()
    if row is None:
        return "owner"
    return narrower(cast(ShareLevel, row[0]), cast(ShareLevel, row[1]))


def _find(workspace_id: str, agent_name: str, port: int) -> WorkspacePortShare | None:
    found: WorkspacePortShare | None = db.session.scalar(
        select(WorkspacePortShare).where(
            WorkspacePortShare.workspace_id == workspace_id,
            WorkspacePortShare.agent_name == agent_name,
            WorkspacePortShare.port == port,
        )
    )
    return found


def levels_up_to(workspace: Workspace) -> tuple[ShareLevel, ...]:
    """The share levels the workspace's template allows, narrowest first."""
    return SHARE_LEVELS[: SHARE_LEVELS.index(_max_level(workspace)) + 1]


def _max_level(workspace: Workspace) -> ShareLevel:
    level = workspace.template.max_port_share_level
    return level if level in SHARE_LEVELS else "owner"


def _agent_name(workspace: Workspace, wanted: str) -> str:
    """The agent's name as the template wrote it, if the workspace's current build has it."""
    names = [agent.name for resource in job_resources(latest_build(workspace).job_id) for agent in resource.agents]
    for name in names:
        if name.lower() == wanted.lower():
            return name
    raise InvalidInput(
        f"Workspace {workspace.name} has no agent {wanted!r}.",
        validations=[{"field": "agent_name", "detail": f"One of: {', '.join(sorted(names)) or 'none'}."}],
    )
