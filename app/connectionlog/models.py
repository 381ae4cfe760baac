from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, new_id, utcnow
from app.core.extensions import Model

# Coder's connection types (codersdk ConnectionType): SSH, the web terminal, a forwarded port, an app session.
TYPE_SSH = "ssh"
TYPE_TERMINAL = "reconnecting_pty"
TYPE_PORT_FORWARDING = "port_forwarding"
TYPE_WORKSPACE_APP = "workspace_app"
TYPES = (TYPE_SSH, TYPE_TERMINAL, TYPE_PORT_FORWARDING, TYPE_WORKSPACE_APP)
# Why a connection ended. "lost": the replica that held it died, and the sweep ended it (app/agents/connections.py).
REASON_CLOSED = "closed"
REASON_TIMED_OUT = "timed_out"
REASON_WORKSPACE_STOPPED = "workspace_stopped"
REASON_ACCESS_REMOVED = "access_removed"
REASON_LOST = "lost"
# How the server holds it: a tunnel it relays (ended when the relay stops), or HTTP requests (ended when idle).
VIA_TUNNEL = "tunnel"
VIA_HTTP = "http"
REASONS = (REASON_CLOSED, REASON_TIMED_OUT, REASON_WORKSPACE_STOPPED, REASON_ACCESS_REMOVED, REASON_LOST)


class ConnectionLog(Model):
    """One connection. Names are copied, not joined: the log outlives the workspaces and people it names."""

    __tablename__ = "connection_logs"
    __table_args__ = (
        Index("ix_connection_logs_connect_time", "connect_time"),
        Index("ix_connection_logs_workspace_id_connect_time", "workspace_id", "connect_time"),
        Index("ix_connection_logs_user_id_connect_time", "user_id", "connect_time"),
        Index("ix_connection_logs_workspace_owner_id_connect_time", "workspace_owner_id", "connect_time"),
        # The sweep reads the open ones only.
        Index("ix_connection_logs_disconnect_time", "disconnect_time"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    connect_time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    disconnect_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    disconnect_reason: Mapped[str | None] = mapped_column(String(32))
    # An app session's last request (renewed at most once a minute); a tunnel's start.
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    type: Mapped[str] = mapped_column(String(32))
    via: Mapped[str] = mapped_column(String(8))
    user_id: Mapped[str | None] = mapped_column(String(36))  # None: a signed-out visitor of a public app
    username: Mapped[str] = mapped_column(String(64), default="")
    organization_id: Mapped[str] = mapped_column(String(36))
    workspace_id: Mapped[str] = mapped_column(String(36))
    workspace_name: Mapped[str] = mapped_column(String(64))
    workspace_owner_id: Mapped[str] = mapped_column(String(36))
    workspace_owner_username: Mapped[str] = mapped_column(String(64))
    template_id: Mapped[str] = mapped_column(String(36))
    agent_name: Mapped[str] = mapped_column(String(64))
    slug_or_port: Mapped[str] = mapped_column(String(64), default="")
    ip: Mapped[str] = mapped_column(String(64), default="")
    user_agent: Mapped[str] = mapped_column(String(512), default="")
