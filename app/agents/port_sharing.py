"""Who may open a workspace's listening ports: its owner, unless the owner shared the port further."""

from __future__ import annotations

from protocol.resources import ShareLevel


def port_share_level(workspace_id: str, agent_name: str, port: int) -> ShareLevel:
    return "owner"
