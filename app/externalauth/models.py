from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import IdColumn, UTCDateTime, new_id, utcnow
from app.core.encrypted_columns import EncryptedText
from app.core.extensions import Model


class ExternalAuthLink(Model):
    """One person's link with one Git provider. The tokens are encrypted at rest (app/core/crypto.py) and never
    leave the server except to that person's own builds and workspaces."""

    __tablename__ = "external_auth_links"
    __table_args__ = (UniqueConstraint("user_id", "provider_id"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    provider_id: Mapped[str] = mapped_column(String(64), index=True)
    access_token: Mapped[str] = mapped_column(EncryptedText)
    refresh_token: Mapped[str | None] = mapped_column(EncryptedText)
    # The token response's other fields (JSON), for `slipway external-auth access-token --extra`.
    token_extra: Mapped[str | None] = mapped_column(EncryptedText)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why the provider refused the token at the last validation or refresh; "" while it is good.
    validate_error: Mapped[str] = mapped_column(Text, default="")
    validated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class GitSSHKey(Model):
    """A person's SSH key for Git (ed25519), generated on first use; the private half is encrypted at rest."""

    __tablename__ = "git_ssh_keys"

    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    private_key: Mapped[str] = mapped_column(EncryptedText)
    public_key: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
