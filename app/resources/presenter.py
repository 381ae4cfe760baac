"""Resources and agents as the API shows them (Coder's shapes, with the fields Slipway has)."""

from __future__ import annotations

from datetime import datetime

from flask import current_app

from app.core.columns import rfc3339, utcnow
from app.core.safe_urls import safe_icon_url, safe_url
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.resources.status import Health, agent_health, connection_status
from protocol.codec import JSON, JsonObject


def heartbeat_seconds() -> int:
    seconds: int = current_app.config["SLIPWAY_SETTINGS"].agent_heartbeat_interval
    return seconds


SUBDOMAIN_UNAVAILABLE = (
    "This is a subdomain app and the server has no wildcard access URL (--wildcard-access-url), so it cannot be "
    "opened. Ask the operator to set one."
)


def subdomain_unavailable_reason() -> str:
    """Why subdomain apps cannot open on this deployment ("" when they can)."""
    return "" if current_app.config["SLIPWAY_SETTINGS"].wildcard_access_url else SUBDOMAIN_UNAVAILABLE


def status_of(agent: WorkspaceAgent, now: datetime | None = None) -> str:
    return connection_status(agent, heartbeat_seconds(), now)


def health_of(agent: WorkspaceAgent, now: datetime | None = None) -> Health:
    return agent_health(agent, status_of(agent, now))


def metadata_items(agent: WorkspaceAgent, now: datetime | None = None) -> list[JsonObject]:
    """Each metadata block of the definition with its latest result (age in seconds, as Coder reports it)."""
    now = now or utcnow()
    items: list[JsonObject] = []
    for block in agent.definition.metadata:
        result = agent.metadata_results.get(block.key) or {}
        collected = result.get("collected_at")
        age = None
        if collected:
            age = max(int((now - datetime.fromisoformat(collected.replace("Z", "+00:00"))).total_seconds()), 0)
        items.append(
            {
                "description": {
                    "key": block.key,
                    "display_name": block.display_name or block.key,
                    "script": block.script,
                    "interval": block.interval,
                    "timeout": block.timeout,
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


def agent_json(agent: WorkspaceAgent, *, script_text: bool = True) -> JsonObject:
    """API.md's agent. ``script_text`` False withholds its scripts' text (each ``script`` is ""), for readers who
    are not the workspace's owner: a template may have written the owner's tokens into a script."""
    now = utcnow()
    status = status_of(agent, now)
    health = agent_health(agent, status)
    definition = agent.definition
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
        "troubleshooting_url": safe_url(definition.troubleshooting_url),
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
                "slug": app.slug,
                "display_name": app.name,
                "url": app.url,
                "command": app.command,
                "icon": safe_icon_url(app.icon),
                "external": app.external,
                "subdomain": app.subdomain,
                # A subdomain app is never served on the dashboard's origin: without a wildcard URL it cannot open.
                "unavailable_reason": subdomain_unavailable_reason() if app.subdomain else "",
                "hidden": app.hidden,
                "sharing_level": app.share,
                "healthcheck": None if app.healthcheck is None else app.healthcheck.to_json(),
                "health": agent.app_health_of(app.slug),
            }
            for app in definition.apps
        ],
        "metadata": list[JSON](metadata_items(agent, now)),
        "log_sources": [source.to_json() for source in agent.log_sources],
        "scripts": [
            {key: value for key, value in script.to_json().items() if key != "id"}
            | {"icon": safe_icon_url(script.icon)}
            | ({} if script_text else {"script": ""})
            for script in definition.scripts
        ],
    }


def resource_json(resource: WorkspaceResource, *, script_text: bool = True) -> JsonObject:
    return {
        "id": resource.id,
        "name": resource.name,
        "type": resource.type,
        "kind": resource.kind,
        "lifecycle": resource.lifecycle,
        "hide": resource.hide,
        "icon": safe_icon_url(resource.icon),
        "daily_cost": resource.daily_cost,
        "agents": [agent_json(agent, script_text=script_text) for agent in resource.agents],
        "metadata": [
            {"key": item.key, "value": "*****" if item.sensitive else item.value, "sensitive": item.sensitive}
            for item in resource.metadata_items
        ],
    }
