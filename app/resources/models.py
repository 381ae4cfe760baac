"""Resources and agents as stored: identity from the build, then what the running agent reports."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship
from sqlalchemy.sql.expression import false

from app.core.columns import IdColumn, MessageListColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.encrypted_columns import EncryptedMessageColumn, EncryptedText
from app.core.extensions import Model
from app.core.safe_urls import safe_icon_url
from protocol.codec import JsonObject
from protocol.resources import Agent, App, MetadataItem

SHUTTING_DOWN_STATES = ("shutting_down", "shutdown_timeout", "shutdown_error", "off")
APP_HEALTH_STATES = ("disabled", "initializing", "healthy", "unhealthy")


class WorkspaceResource(Model):
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
    # Sensitive items are kept without their value, which nothing shows.
    metadata_items: Mapped[tuple[MetadataItem, ...]] = mapped_column(MessageListColumn(MetadataItem), default=())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    agents: Mapped[list[WorkspaceAgent]] = relationship(order_by="WorkspaceAgent.name", cascade="all, delete-orphan")


class WorkspaceAgent(Model):
    __tablename__ = "workspace_agents"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    resource_id: Mapped[str] = mapped_column(ForeignKey("workspace_resources.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    os: Mapped[str] = mapped_column(String(16))
    arch: Mapped[str] = mapped_column(String(16))
    directory: Mapped[str] = mapped_column(Text, default="")
    connection_timeout: Mapped[int] = mapped_column(Integer, default=120)
    # The agent as the template defines it (env, scripts, metadata blocks, apps, display apps…), without its
    # token; each script carries the id of the log source its output goes to. Encrypted: templates hand secrets
    # to their workspaces through the agent's env and scripts.
    stored_definition: Mapped[Agent | None] = mapped_column(
        "definition", EncryptedMessageColumn(Agent), nullable=False, default=Agent
    )
    # SHA-256 of the agent token from the build's state: the agent authenticates with the token itself.
    token_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    # A claimed prebuild's running agent: the new token its claim build gives it, until the server has handed it
    # over on the agent's control connection (the old token is refused from the claim on).
    pending_token: Mapped[str | None] = mapped_column(EncryptedText, nullable=True)
    lifecycle_state: Mapped[str] = mapped_column(String(32), default="created")
    lifecycle_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[str] = mapped_column(String(64), default="", server_default="")
    expanded_directory: Mapped[str] = mapped_column(Text, default="", server_default="")
    first_connected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_connected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    disconnected_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The control connection that counts: a replica closing an older one must not mark a reconnected agent gone.
    connection_id: Mapped[str | None] = mapped_column(String(36))
    logs_length: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    logs_overflowed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # {key: {"value", "error", "collected_at"}}: the latest result of each of the definition's metadata blocks.
    metadata_results: Mapped[dict[str, dict[str, str]]] = mapped_column(JSON, default=dict, server_default="{}")
    # {app slug: "initializing" | "healthy" | "unhealthy"} for apps with a healthcheck.
    app_health: Mapped[dict[str, str]] = mapped_column(JSON, default=dict, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    log_sources: Mapped[list[AgentLogSource]] = relationship(
        order_by="AgentLogSource.created_at", cascade="all, delete-orphan"
    )

    @property
    def definition(self) -> Agent:
        return self.stored_definition or Agent()

    @property
    def apps(self) -> tuple[App, ...]:
        return self.definition.apps

    def app_health_of(self, slug: str) -> str:
        app = self.definition.app(slug)
        if app is None or app.healthcheck is None or not app.healthcheck.url:
            return "disabled"
        return self.app_health.get(slug, "initializing")


class AgentLogSource(Model):
    """Where a group of agent log lines comes from: one per script, named as the template names it."""

    __tablename__ = "workspace_agent_log_sources"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    agent_id: Mapped[str] = mapped_column(ForeignKey("workspace_agents.id", ondelete="CASCADE"), index=True)
    display_name: Mapped[str] = mapped_column(String(128))
    icon: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "workspace_agent_id": self.agent_id,
            "display_name": self.display_name,
            "icon": safe_icon_url(self.icon),
            "created_at": rfc3339(self.created_at),
        }
