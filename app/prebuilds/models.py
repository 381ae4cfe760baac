from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Integer, false
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, utcnow
from app.core.extensions import Model

SETTINGS_ROW_ID = 1


class PrebuildsSettings(Model):
    """One row (``id`` 1), written by the first change: until then reconciliation runs (Coder's
    ``is_reconciliation_paused``)."""

    __tablename__ = "prebuilds_settings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    reconciliation_paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
