from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.extensions import db
from app.users.models import User

# A session token comes from signing in (CLI or API); an API token is one a user created by name.
KIND_SESSION = "session"
KIND_TOKEN = "token"  # noqa: S105 - a kind label, not a secret


class ApiKey(db.Model):  # type: ignore[name-defined,misc]
    """A bearer credential ``<lookup_id>-<secret>``; only a SHA-256 of the secret is stored."""

    __tablename__ = "api_keys"
    __table_args__ = (UniqueConstraint("user_id", "name", name="uq_api_keys_user_id_name"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    lookup_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    # Session tokens have no name; NULLs never collide in the (user_id, name) constraint.
    name: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user: Mapped[User] = relationship()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at),
            "last_used_at": rfc3339(self.last_used_at),
        }


class BrowserSession(db.Model):  # type: ignore[name-defined,misc]
    """A signed-in browser. Its cookie carries ``<lookup_id>-<secret>``; only a SHA-256 of the secret is stored, so
    signing out (deleting the row) ends the session on the server, not just in the browser that asked."""

    __tablename__ = "browser_sessions"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    lookup_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Shown on the Account page so that a person can tell their browsers apart; never used to decide anything.
    user_agent: Mapped[str] = mapped_column(String(255), default="")

    user: Mapped[User] = relationship()
