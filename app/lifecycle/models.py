from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import UTCDateTime
from app.core.extensions import Model


class LifecycleTick(Model):
    """One row: the last minute the executor acted on, and the fencing token of the replica that did. A replica
    acts on a tick only if its conditional UPDATE of this row wins (a newer token, a later minute), so several
    replicas never both act, even when a Redis lock expired under a slow one."""

    __tablename__ = "lifecycle_ticks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    fence: Mapped[int] = mapped_column(BigInteger, default=0)
    tick_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
