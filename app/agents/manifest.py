"""The manifest an agent fetches at start: who it is, what to run, what to collect (agent/README.md)."""

from __future__ import annotations

from flask import current_app

from app.agents.services import MAX_AGENT_LOG_BYTES, build_of
from app.core.errors import NotFound
from app.resources.models import WorkspaceAgent
from protocol.agentapi import Manifest


def environment(agent: WorkspaceAgent) -> dict[str, str]:
    """``coder_agent.env`` with the ``coder_env`` resources applied by their merge strategy (paths join with ':')."""
    merged = dict(agent.definition.env)
    for item in agent.definition.envs:
        if not item.name:
            continue
        if item.merge_strategy == "append" and merged.get(item.name):
            merged[item.name] = f"{merged[item.name]}:{item.value}"
        elif item.merge_strategy == "prepend" and merged.get(item.name):
            merged[item.name] = f"{item.value}:{merged[item.name]}"
        else:  # "replace", and "error" (a conflict would already have failed the build)
            merged[item.name] = item.value
    return merged


def build_manifest(agent: WorkspaceAgent) -> Manifest:
    build = build_of(agent)
    if build is None:
        raise NotFound("The agent's build is gone.")
    workspace, definition = build.workspace, agent.definition
    return Manifest(
        agent_id=agent.id,
        agent_name=agent.name,
        workspace_id=workspace.id,
        workspace_name=workspace.name,
        owner_name=workspace.owner.username,
        directory=agent.directory,
        environment_variables=environment(agent),
        motd_file=definition.motd_file,
        scripts=definition.scripts,
        metadata=definition.metadata,
        apps=definition.apps,
        heartbeat_seconds=current_app.config["SLIPWAY_SETTINGS"].agent_heartbeat_interval,
        log_limit_bytes=MAX_AGENT_LOG_BYTES,
    )
