from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.core.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.extensions import Model
from protocol.codec import JsonObject


class Notification(Model):
    """One event told to one person: a row of their dashboard inbox, and what email and webhook deliveries send."""

    __tablename__ = "notifications"
    __table_args__ = (Index("ix_notifications_user_id_created_at", "user_id", "created_at"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(32))
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text, default="")
    # A path in the dashboard the event is about (a build's page), for the inbox and the email's link.
    link: Mapped[str] = mapped_column(String(512), default="")
    workspace_id: Mapped[str | None] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    # Events the executor may see on many ticks ("going dormant in 24 h") are told once: same key, no new row.
    dedupe_key: Mapped[str | None] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    read_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "event": self.event,
            "title": self.title,
            "body": self.body,
            "link": self.link,
            "workspace_id": self.workspace_id,
            "created_at": rfc3339(self.created_at),
            "read_at": rfc3339(self.read_at),
        }


CHANNELS = ("email", "webhook")
PENDING, SENT, FAILED = "pending", "sent", "failed"


class NotificationDelivery(Model):
    """One notification to send on one channel: the outbox. A row waits here until it is sent, so a dead SMTP
    server or webhook receiver loses nothing; the queue worker tries it with growing back-off."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (Index("ix_notification_deliveries_status_next_attempt_at", "status", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    notification_id: Mapped[str] = mapped_column(ForeignKey("notifications.id", ondelete="CASCADE"), index=True)
    channel: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    notification: Mapped[Notification] = relationship()

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "notification_id": self.notification_id,
            "channel": self.channel,
            "status": self.status,
            "attempts": self.attempts,
            "next_attempt_at": rfc3339(self.next_attempt_at),
            "last_error": self.last_error,
            "created_at": rfc3339(self.created_at),
            "sent_at": rfc3339(self.sent_at),
        }


class NotificationPreference(Model):
    """An event a person turned off (every event is on until they do)."""

    __tablename__ = "notification_preferences"

    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    event: Mapped[str] = mapped_column(String(32), primary_key=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
