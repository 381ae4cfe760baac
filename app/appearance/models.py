from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime, utcnow
from app.core.extensions import Model
from protocol.codec import JsonObject

SINGLETON_ID = 1


class Appearance(Model):
    """One row (``id`` 1), written by the first change: until then every page shows the defaults. Banners and links
    are JSON lists, each item validated by app.appearance.services before it is stored."""

    __tablename__ = "appearance"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    application_name: Mapped[str] = mapped_column(String(64), default="")
    logo_url: Mapped[str] = mapped_column(String(512), default="")
    docs_url: Mapped[str] = mapped_column(String(512), default="")
    service_banner: Mapped[JsonObject] = mapped_column(JSON, default=dict)
    announcement_banners: Mapped[list[JsonObject]] = mapped_column(JSON, default=list)
    support_links: Mapped[list[JsonObject]] = mapped_column(JSON, default=list)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
