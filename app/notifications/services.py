"""What features call to tell someone something: :func:`notify` adds the inbox row in the caller's transaction."""

from __future__ import annotations

from sqlalchemy import select

from app.core.extensions import db
from app.notifications.models import Notification

BUILD_FAILED = "build_failed"
WORKSPACE_AUTOSTOPPED = "workspace_autostopped"
WORKSPACE_AUTOSTARTED = "workspace_autostarted"
WORKSPACE_AUTOUPDATED = "workspace_autoupdated"
DORMANCY_WARNING = "workspace_dormancy_warning"  # going dormant in 24 h
WORKSPACE_DORMANT = "workspace_dormant"
DELETION_WARNING = "workspace_deletion_warning"  # deleted in 24 h
WORKSPACE_DELETED = "workspace_deleted"
EVENTS = {
    BUILD_FAILED: "A build of my workspace failed",
    WORKSPACE_AUTOSTOPPED: "My workspace was stopped on schedule",
    WORKSPACE_AUTOSTARTED: "My workspace was started on schedule",
    WORKSPACE_AUTOUPDATED: "My workspace was updated to a new template version",
    DORMANCY_WARNING: "My workspace will go dormant within 24 hours",
    WORKSPACE_DORMANT: "My workspace was marked dormant",
    DELETION_WARNING: "My dormant workspace will be deleted within 24 hours",
    WORKSPACE_DELETED: "My workspace was deleted automatically",
}


def notify(
    user_id: str,
    event: str,
    *,
    title: str,
    body: str = "",
    link: str = "",
    workspace_id: str | None = None,
    dedupe_key: str | None = None,
) -> Notification | None:
    """Record ``event`` for ``user_id`` in the caller's session (the caller commits). With ``dedupe_key``, an event
    already recorded under that key is not recorded again (None)."""
    if event not in EVENTS:
        raise ValueError(f"unknown notification event {event!r}")
    if dedupe_key is not None and db.session.scalar(
        select(Notification.id).where(Notification.dedupe_key == dedupe_key)
    ):
        return None
    notification = Notification(
        user_id=user_id, event=event, title=title[:200], body=body, link=link, workspace_id=workspace_id,
        dedupe_key=dedupe_key,
    )  # fmt: skip
    db.session.add(notification)
    return notification
