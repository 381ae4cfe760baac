"""Resources and agents of a job: from an import's start and stop plans, or from a build's state."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, select
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.agents.models import AgentLogSource, WorkspaceAgent
from app.agents.presenter import agent_json
from app.columns import IdColumn, UTCDateTime, new_id, utcnow
from app.errors import InvalidInput
from app.extensions import db
from app.safe_urls import safe_icon_url


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
            "icon": safe_icon_url(self.icon),
            "daily_cost": self.daily_cost,
            "agents": [agent_json(agent) for agent in self.agents],
            "metadata": [
                {
                    "key": item.get("key", ""),
                    "value": "*****" if item.get("sensitive") else item.get("value", ""),
                    "sensitive": bool(item.get("sensitive")),
                }
                for item in self.metadata_items
            ],
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
        "scripts",
    }
    row = WorkspaceAgent(
        id=new_id(),
        name=str(agent.get("name", ""))[:64],
        os=str(agent.get("os", ""))[:16],
        arch=str(agent.get("arch", ""))[:16],
        directory=str(agent.get("dir") or ""),
        env={str(k): str(v) for k, v in (agent.get("env") or {}).items()},
        startup_script=str(agent.get("startup_script") or ""),
        shutdown_script=str(agent.get("shutdown_script") or ""),
        # 0 is meaningful (never time out); only an absent value takes Coder's default.
        connection_timeout=120 if agent.get("connection_timeout") is None else int(agent["connection_timeout"]),
        token_hash=hashlib.sha256(token.encode()).hexdigest() if token else None,
    )
    definition = {key: value for key, value in agent.items() if key not in known}
    definition["scripts"] = _scripts_with_log_sources(row, agent)
    row.definition = definition
    return row


def _scripts_with_log_sources(row: WorkspaceAgent, agent: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's scripts, the legacy startup/shutdown scripts among them, each with a log source of its own."""
    scripts = [dict(script) for script in agent.get("scripts") or [] if isinstance(script, dict)]
    if agent.get("startup_script"):
        scripts.insert(0, {"display_name": "Startup Script", "script": agent["startup_script"], "run_on_start": True})
    if agent.get("shutdown_script"):
        scripts.append({"display_name": "Shutdown Script", "script": agent["shutdown_script"], "run_on_stop": True})
    for script in scripts:
        source = AgentLogSource(
            id=new_id(),
            display_name=str(script.get("display_name") or "Script")[:128],
            icon=str(script.get("icon") or "")[:255],
        )
        row.log_sources.append(source)
        script["log_source_id"] = source.id
    return scripts


def job_resources(job_id: str, transition: str | None = None) -> list[WorkspaceResource]:
    query = select(WorkspaceResource).where(WorkspaceResource.job_id == job_id)
    if transition is not None:
        query = query.where(WorkspaceResource.transition == transition)
    return list(db.session.scalars(query.order_by(WorkspaceResource.type, WorkspaceResource.name)))
