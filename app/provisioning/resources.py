"""Resources and agents of a job: from an import's start and stop plans, or from a build's state."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.errors import InvalidInput
from app.extensions import db


class WorkspaceResource(db.Model):  # type: ignore[name-defined,misc]
    """A resource of a job's plan (imports: transition start and stop) or of a build's state."""

    __tablename__ = "workspace_resources"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("provisioner_jobs.id", ondelete="CASCADE"), index=True)
    transition: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    lifecycle: Mapped[str] = mapped_column(String(16), default="persistent")
    hide: Mapped[bool] = mapped_column(Boolean, default=False)
    icon: Mapped[str] = mapped_column(String(255), default="")
    daily_cost: Mapped[int] = mapped_column(Integer, default=0)
    metadata_items: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    agents: Mapped[list[WorkspaceAgent]] = relationship(order_by="WorkspaceAgent.name", cascade="all, delete-orphan")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "type": self.type,
            "kind": self.kind,
            "lifecycle": self.lifecycle,
            "hide": self.hide,
            "icon": self.icon,
            "daily_cost": self.daily_cost,
            "agents": [agent.to_json() for agent in self.agents],
            "metadata": [
                {
                    "key": item.get("key", ""),
                    "value": "*****" if item.get("sensitive") else item.get("value", ""),
                    "sensitive": bool(item.get("sensitive")),
                }
                for item in self.metadata_items
            ],
        }


class WorkspaceAgent(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "workspace_agents"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    resource_id: Mapped[str] = mapped_column(ForeignKey("workspace_resources.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    os: Mapped[str] = mapped_column(String(16))
    arch: Mapped[str] = mapped_column(String(16))
    directory: Mapped[str] = mapped_column(Text, default="")
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    startup_script: Mapped[str] = mapped_column(Text, default="")
    shutdown_script: Mapped[str] = mapped_column(Text, default="")
    connection_timeout: Mapped[int] = mapped_column(Integer, default=120)
    # The rest of the agent's definition (metadata blocks, apps, scripts, display apps) as the daemon parsed it.
    definition: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # SHA-256 of the agent token from the build's state: the agent authenticates with the token itself.
    token_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    lifecycle_state: Mapped[str] = mapped_column(String(32), default="created")
    first_connected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_connected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    disconnected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    @property
    def status(self) -> str:
        if self.first_connected_at is None:
            return "connecting"
        if (
            self.disconnected_at is not None
            and (self.last_connected_at or self.disconnected_at) <= self.disconnected_at
        ):
            return "disconnected"
        return "connected"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "os": self.os,
            "arch": self.arch,
            "directory": self.directory,
            "status": self.status,
            "lifecycle_state": self.lifecycle_state,
            "connection_timeout_seconds": self.connection_timeout,
            "apps": self.definition.get("apps", []),
            "created_at": rfc3339(self.created_at),
        }


def store_resources(job_id: str, transition: str, resources: Any, *, stop_resources: Any = None) -> None:
    """Insert the resources a daemon reported. With ``stop_resources`` (imports), a resource absent from the stop
    plan is ephemeral and one present in both is persistent."""
    if not isinstance(resources, list):
        raise InvalidInput("resources must be a list.")
    persistent = {(item.get("type"), item.get("name")) for item in stop_resources or [] if isinstance(item, dict)}
    for item in resources:
        if not isinstance(item, dict):
            raise InvalidInput("each resource must be an object.")
        agents = [_agent_row(agent) for agent in item.get("agents") or []]
        lifecycle = "persistent"
        if stop_resources is not None and (item.get("type"), item.get("name")) not in persistent:
            lifecycle = "ephemeral"
        db.session.add(
            WorkspaceResource(
                job_id=job_id,
                transition=transition,
                name=str(item.get("name", ""))[:255],
                type=str(item.get("type", ""))[:255],
                kind="computational" if agents else "peripheral",
                lifecycle=lifecycle,
                hide=bool(item.get("hide", False)),
                icon=str(item.get("icon") or "")[:255],
                daily_cost=int(item.get("daily_cost") or 0),
                metadata_items=[m for m in item.get("metadata") or [] if isinstance(m, dict)],
                agents=agents,
            )
        )


def _agent_row(agent: Any) -> WorkspaceAgent:
    if not isinstance(agent, dict):
        raise InvalidInput("each agent must be an object.")
    token = str(agent.get("token") or "")
    known = {
        "name",
        "os",
        "arch",
        "dir",
        "env",
        "startup_script",
        "shutdown_script",
        "connection_timeout",
        "token",
        "id",
    }
    return WorkspaceAgent(
        name=str(agent.get("name", ""))[:64],
        os=str(agent.get("os", ""))[:16],
        arch=str(agent.get("arch", ""))[:16],
        directory=str(agent.get("dir") or ""),
        env={str(k): str(v) for k, v in (agent.get("env") or {}).items()},
        startup_script=str(agent.get("startup_script") or ""),
        shutdown_script=str(agent.get("shutdown_script") or ""),
        connection_timeout=int(agent.get("connection_timeout") or 120),
        definition={key: value for key, value in agent.items() if key not in known},
        token_hash=hashlib.sha256(token.encode()).hexdigest() if token else None,
    )


def job_resources(job_id: str, transition: str | None = None) -> list[WorkspaceResource]:
    query = select(WorkspaceResource).where(WorkspaceResource.job_id == job_id)
    if transition is not None:
        query = query.where(WorkspaceResource.transition == transition)
    return list(db.session.scalars(query.order_by(WorkspaceResource.type, WorkspaceResource.name)))
