"""An agent's connection status and health, derived from its timestamps (never stored), as reference §1.3-1.4."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.core.columns import utcnow
from app.resources.models import SHUTTING_DOWN_STATES, WorkspaceAgent

CONNECTING, CONNECTED, DISCONNECTED, TIMEOUT = "connecting", "connected", "disconnected", "timeout"
# A connection whose server stopped writing heartbeats (a replica killed outright) counts as gone after this
# many heartbeat intervals.
INACTIVE_HEARTBEATS = 3


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str = ""


def connection_status(agent: WorkspaceAgent, heartbeat_seconds: int, now: datetime | None = None) -> str:
    """Coder's rules in their order, and one more: an agent gone for longer than its ``connection_timeout``
    is ``timeout``, not merely ``disconnected`` (it is not coming back by itself)."""
    now = now or utcnow()
    timeout = timedelta(seconds=agent.connection_timeout) if agent.connection_timeout > 0 else None
    if agent.first_connected_at is None or agent.last_connected_at is None:
        return TIMEOUT if timeout is not None and now - agent.created_at > timeout else CONNECTING
    gone_since: datetime | None = None
    if agent.disconnected_at is not None and agent.disconnected_at >= agent.last_connected_at:
        gone_since = agent.disconnected_at
    elif now - agent.last_connected_at > timedelta(seconds=heartbeat_seconds * INACTIVE_HEARTBEATS):
        gone_since = agent.last_connected_at
    if gone_since is None:
        return CONNECTED
    return TIMEOUT if timeout is not None and now - gone_since > timeout else DISCONNECTED


def agent_health(agent: WorkspaceAgent, status: str) -> Health:
    """Reference §1.3: the first matching rule wins; ``start_timeout`` is deliberately healthy."""
    lifecycle = agent.lifecycle_state
    if status != CONNECTED and lifecycle == "off":
        return Health(False, "The agent is not running.")
    if status == CONNECTING:
        return Health(False, "The agent has not connected yet.")
    if status == TIMEOUT:
        return Health(False, "The agent is taking too long to connect.")
    if status == DISCONNECTED:
        return Health(False, "The agent has lost its connection.")
    if lifecycle == "start_error":
        return Health(False, "The agent's startup script exited with an error.")
    if lifecycle in SHUTTING_DOWN_STATES:
        return Health(False, "The agent is shutting down.")
    return Health(True)
