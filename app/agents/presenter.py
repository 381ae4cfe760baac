"""Agents as the API shows them (Coder's WorkspaceAgent shape, the fields Slipway has)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import current_app

from app.agents.models import WorkspaceAgent
from app.agents.status import Health, agent_health, connection_status
from app.columns import rfc3339, utcnow
from app.safe_urls import safe_icon_url, safe_url


def heartbeat_seconds() -> int:
    seconds: int = current_app.config["SLIPWAY_SETTINGS"].agent_heartbeat_interval
    return seconds


def status_of(agent: WorkspaceAgent, now: datetime | None = None) -> str:
    return connection_status(agent, heartbeat_seconds(), now)


def health_of(agent: WorkspaceAgent, now: datetime | None = None) -> Health:
    return agent_health(agent, status_of(agent, now))


def metadata_items(agent: WorkspaceAgent, now: datetime | None = None) -> list[dict[str, Any]]:
    """Each metadata block of the definition with its latest result (age in seconds, as Coder reports it)."""
    now = now or utcnow()
    items = []
    for block in agent.definition.get("metadata") or []:
        key = str(block.get("key", ""))
        result = agent.metadata_results.get(key) or {}
        collected = result.get("collected_at")
        age = None
        if collected:
            age = max(int((now - datetime.fromisoformat(collected.replace("Z", "+00:00"))).total_seconds()), 0)
        items.append(
            {
                "description": {
                    "key": key,
                    "display_name": block.get("display_name") or key,
                    "script": block.get("script", ""),
                    "interval": block.get("interval", 0),
                    "timeout": block.get("timeout", 0),
                },
                "result": {
                    "value": result.get("value", ""),
                    "error": result.get("error", ""),
                    "collected_at": collected,
                    "age": age,
                },
            }
        )
    return items


def agent_json(agent: WorkspaceAgent) -> dict[str, Any]:
    now = utcnow()
    status = status_of(agent, now)
    health = agent_health(agent, status)
    return {
        "id": agent.id,
        "name": agent.name,
        "resource_id": agent.resource_id,
        "os": agent.os,
        "arch": agent.arch,
        "operating_system": agent.os,
        "architecture": agent.arch,
        "directory": agent.directory,
        "expanded_directory": agent.expanded_directory,
        "version": agent.version,
        "status": status,
        "lifecycle_state": agent.lifecycle_state,
        "health": {"healthy": health.healthy, "reason": health.reason},
        "connection_timeout_seconds": agent.connection_timeout,
        # Chosen by the template (or whoever runs the agent): clients render it as a link, so only http(s).
        "troubleshooting_url": safe_url(agent.definition.get("troubleshooting_url")),
        "created_at": rfc3339(agent.created_at),
        "first_connected_at": rfc3339(agent.first_connected_at),
        "last_connected_at": rfc3339(agent.last_connected_at),
        "disconnected_at": rfc3339(agent.disconnected_at),
        "started_at": rfc3339(agent.started_at),
        "ready_at": rfc3339(agent.ready_at),
        "logs_length": agent.logs_length,
        "logs_overflowed": agent.logs_overflowed,
        "apps": [
            {
                "slug": app.get("slug", ""),
                "display_name": app.get("display_name") or app.get("slug", ""),
                "url": app.get("url", ""),
                "command": app.get("command", ""),
                "icon": safe_icon_url(app.get("icon")),
                "external": bool(app.get("external")),
                "subdomain": bool(app.get("subdomain")),
                "hidden": bool(app.get("hidden")),
                "sharing_level": app.get("share") or "owner",
                "healthcheck": app.get("healthcheck"),
                "health": agent.app_health_of(str(app.get("slug", ""))),
            }
            for app in agent.apps
        ],
        "metadata": metadata_items(agent, now),
        "log_sources": [source.to_json() for source in agent.log_sources],
        "scripts": [
            {key: script.get(key) for key in _SCRIPT_FIELDS} | {"icon": safe_icon_url(script.get("icon"))}
            for script in agent.definition.get("scripts") or []
        ],
    }


_SCRIPT_FIELDS = (
    "log_source_id", "display_name", "icon", "script", "cron", "run_on_start", "run_on_stop",
    "start_blocks_login", "timeout", "log_path",
)  # fmt: skip
