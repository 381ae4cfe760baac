"""The manifest an agent fetches at start: who it is, what to run, what to collect (agent/README.md)."""

from __future__ import annotations

from typing import Any

from flask import current_app

from app.agents.models import WorkspaceAgent
from app.agents.services import MAX_AGENT_LOG_BYTES, build_of
from app.errors import NotFound

SCRIPT_FIELDS = {
    "log_source_id": "", "display_name": "", "icon": "", "script": "", "cron": "", "run_on_start": False,
    "run_on_stop": False, "start_blocks_login": False, "timeout": 0, "log_path": "",
}  # fmt: skip


def environment(agent: WorkspaceAgent) -> dict[str, str]:
    """``coder_agent.env`` with the ``coder_env`` resources applied by their merge strategy (paths join with ':')."""
    merged = dict(agent.env)
    for item in agent.definition.get("envs") or []:
        name, value = str(item.get("name", "")), str(item.get("value") or "")
        if not name:
            continue
        strategy = item.get("merge_strategy") or "replace"
        if strategy == "append" and merged.get(name):
            merged[name] = f"{merged[name]}:{value}"
        elif strategy == "prepend" and merged.get(name):
            merged[name] = f"{value}:{merged[name]}"
        else:  # "replace", and "error" (a conflict would already have failed the build)
            merged[name] = value
    return merged


def build_manifest(agent: WorkspaceAgent) -> dict[str, Any]:
    build = build_of(agent)
    if build is None:
        raise NotFound("The agent's build is gone.")
    workspace = build.workspace
    return {
        "agent_id": agent.id,
        "agent_name": agent.name,
        "workspace_id": workspace.id,
        "workspace_name": workspace.name,
        "owner_name": workspace.owner.username,
        "directory": agent.directory,
        "environment_variables": environment(agent),
        "motd_file": agent.definition.get("motd_file") or "",
        "scripts": [
            {key: script.get(key) if script.get(key) is not None else default for key, default in SCRIPT_FIELDS.items()}
            for script in agent.definition.get("scripts") or []
        ],
        "metadata": [
            {
                "key": block.get("key", ""),
                "display_name": block.get("display_name") or block.get("key", ""),
                "script": block.get("script", ""),
                "interval": int(block.get("interval") or 0),
                "timeout": int(block.get("timeout") or 0),
            }
            for block in agent.definition.get("metadata") or []
        ],
        "apps": [
            {
                "slug": app.get("slug", ""),
                "display_name": app.get("display_name") or app.get("slug", ""),
                "url": app.get("url") or "",
                "command": app.get("command") or "",
                "healthcheck": app.get("healthcheck") if (app.get("healthcheck") or {}).get("url") else None,
            }
            for app in agent.apps
        ],
        "heartbeat_seconds": current_app.config["SLIPWAY_SETTINGS"].agent_heartbeat_interval,
        "log_limit_bytes": MAX_AGENT_LOG_BYTES,
    }
