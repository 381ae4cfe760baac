"""What running agents send that is kept: their script output (the agents themselves are app/resources rows)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.extensions import Model
from protocol.codec import JsonObject


class AgentLog(Model):
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

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "created_at": rfc3339(self.created_at),
            "level": self.level,
            "output": self.output,
            "source_id": self.source_id,
        }


# The connection events kept per agent: enough to see a flapping agent, bounded however long a workspace lives.
CONNECTION_HISTORY = 50
CONNECTED, DISCONNECTED = "connected", "disconnected"


class AgentConnectionEvent(Model):
    """An agent's control connection opened or closed (Coder's connection log, for agents): newest kept."""

    __tablename__ = "workspace_agent_connection_events"
    __table_args__ = (Index("ix_workspace_agent_connection_events_agent_id_id", "agent_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("workspace_agents.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(16))
    connection_id: Mapped[str] = mapped_column(String(36))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def to_json(self) -> JsonObject:
        return {"id": self.id, "event": self.event, "connection_id": self.connection_id, "at": rfc3339(self.at)}


class AgentScriptTiming(Model):
    """One run of a script by the agent (``POST /script-timings``): when, how it ended. Named by its log source."""

    __tablename__ = "workspace_agent_script_timings"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("workspace_agents.id", ondelete="CASCADE"), index=True)
    log_source_id: Mapped[str] = mapped_column(String(64))
    stage: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime] = mapped_column(UTCDateTime)


class WorkspacePortShare(Model):
    """A listening port its workspace's owner opened to more people than themself (Coder's port sharing). The
    template's ``max_port_share_level`` caps it when read, so lowering the cap takes effect at once."""

    __tablename__ = "workspace_port_shares"
    __table_args__ = (UniqueConstraint("workspace_id", "agent_name", "port"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    agent_name: Mapped[str] = mapped_column(String(64))
    port: Mapped[int] = mapped_column(Integer)
    share_level: Mapped[str] = mapped_column(String(16))
    protocol: Mapped[str] = mapped_column(String(8), default="http")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def to_json(self) -> JsonObject:
        return {
            "workspace_id": self.workspace_id,
            "agent_name": self.agent_name,
            "port": self.port,
            "share_level": self.share_level,
            "protocol": self.protocol,
        }
