"""Workspace agents as the server stores them: identity from the build, then what the running agent reports."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.extensions import db
from app.safe_urls import safe_icon_url

LIFECYCLE_STATES = (
    "created", "starting", "ready", "start_timeout", "start_error",
    "shutting_down", "off", "shutdown_timeout", "shutdown_error",
)  # fmt: skip
SHUTTING_DOWN_STATES = ("shutting_down", "shutdown_timeout", "shutdown_error", "off")
APP_HEALTH_STATES = ("disabled", "initializing", "healthy", "unhealthy")
AGENT_LOG_LEVELS = ("trace", "debug", "info", "warn", "error")


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
    # The rest of the agent's definition (metadata blocks, apps, scripts, display apps) as the daemon parsed it;
    # each script carries the id of the log source its output goes to.
    definition: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # SHA-256 of the agent token from the build's state: the agent authenticates with the token itself.
    token_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    lifecycle_state: Mapped[str] = mapped_column(String(32), default="created")
    lifecycle_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[str] = mapped_column(String(64), default="")
    expanded_directory: Mapped[str] = mapped_column(Text, default="")
    first_connected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_connected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    disconnected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The control connection that counts: a replica closing an older one must not mark a reconnected agent gone.
    connection_id: Mapped[str | None] = mapped_column(String(36))
    logs_length: Mapped[int] = mapped_column(Integer, default=0)
    logs_overflowed: Mapped[bool] = mapped_column(Boolean, default=False)
    # {key: {"value", "error", "collected_at"}} for the definition's metadata blocks.
    metadata_results: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # {app slug: "initializing" | "healthy" | "unhealthy"} for apps with a healthcheck.
    app_health: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    log_sources: Mapped[list[AgentLogSource]] = relationship(
        order_by="AgentLogSource.created_at", cascade="all, delete-orphan"
    )

    @property
    def apps(self) -> list[dict[str, Any]]:
        apps: list[dict[str, Any]] = self.definition.get("apps") or []
        return apps

    def app_health_of(self, slug: str) -> str:
        app = next((item for item in self.apps if item.get("slug") == slug), None)
        if app is None or not app.get("healthcheck") or not (app["healthcheck"] or {}).get("url"):
            return "disabled"
        return self.app_health.get(slug, "initializing")


class AgentLogSource(db.Model):  # type: ignore[name-defined,misc]
    """Where a group of agent log lines comes from: one per script, named as the template names it."""

    __tablename__ = "workspace_agent_log_sources"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    agent_id: Mapped[str] = mapped_column(ForeignKey("workspace_agents.id", ondelete="CASCADE"), index=True)
    display_name: Mapped[str] = mapped_column(String(128))
    icon: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace_agent_id": self.agent_id,
            "display_name": self.display_name,
            "icon": safe_icon_url(self.icon),
            "created_at": rfc3339(self.created_at),
        }


class AgentLog(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "workspace_agent_logs"
    __table_args__ = (Index("ix_workspace_agent_logs_agent_id_id", "agent_id", "id"),)

    # SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a bigint identity.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("workspace_agents.id", ondelete="CASCADE"))
    source_id: Mapped[str | None] = mapped_column(
        ForeignKey("workspace_agent_log_sources.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    level: Mapped[str] = mapped_column(String(8))
    output: Mapped[str] = mapped_column(Text)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": rfc3339(self.created_at),
            "level": self.level,
            "output": self.output,
            "source_id": self.source_id,
        }
