from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import IdColumn, UTCDateTime, new_id, utcnow
from app.core.encrypted_columns import EncryptedText
from app.core.extensions import Model


class UserSecret(Model):
    """A value a person stores for their workspaces: Terraform's ``data "coder_secret"`` gets it in a build of their
    workspace as the variable (``env_name``) or the file (``file_path``) it provides. The value is encrypted at
    rest and never shown again once saved."""

    __tablename__ = "user_secrets"
    __table_args__ = (
        UniqueConstraint("user_id", "name"),
        # Unique only when set (NULL is never equal to NULL): a secret may provide neither.
        Index("uq_user_secrets_user_id_env_name", "user_id", "env_name", unique=True),
        Index("uq_user_secrets_user_id_file_path", "user_id", "file_path", unique=True),
    )

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text, default="")
    value: Mapped[str] = mapped_column(EncryptedText)
    env_name: Mapped[str | None] = mapped_column(String(255))
    file_path: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
