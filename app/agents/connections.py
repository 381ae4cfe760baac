"""Open ways into workspaces (SSH, terminals, port forwards, apps) that a change of access no longer allows are
closed at once: the watcher :func:`close_lost` re-checks each open tunnel's holder against the same rule that let
them in (``can_use``, app/workspaces/services.py) and closes those it now refuses, on whichever replica holds
them (tunnels are Redis lists: a close frame pushed here is read there)."""

from __future__ import annotations

import logging

from app.agents import tunnels
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.users.models import User
from app.workspaces.models import Workspace
from app.workspaces.services import can_use
from protocol.agentapi import CLOSE_ACCESS_REVOKED

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
