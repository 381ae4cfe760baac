"""What features call to tell someone something: :func:`notify` adds the inbox row and its deliveries (email,
webhook) in the caller's transaction; the queue worker sends them (app/notifications/delivery.py)."""

from __future__ import annotations

from collections.abc import Mapping

from flask import current_app
from sqlalchemy import Select, select, update

from app.core.columns import utcnow
from app.core.config import Settings
from app.core.errors import InvalidInput, NotFound
from app.core.extensions import db
from app.notifications.models import Notification, NotificationDelivery, NotificationPreference
from protocol.codec import JSON

INBOX_SIZE = 100

BUILD_FAILED = "build_failed"
WORKSPACE_AUTOSTOPPED = "workspace_autostopped"
WORKSPACE_AUTOSTARTED = "workspace_autostarted"
WORKSPACE_AUTOUPDATED = "workspace_autoupdated"
DORMANCY_WARNING = "workspace_dormancy_warning"  # going dormant in 24 h
WORKSPACE_DORMANT = "workspace_dormant"
DELETION_WARNING = "workspace_deletion_warning"  # deleted in 24 h
WORKSPACE_DELETED = "workspace_deleted"
WORKSPACE_OUTDATED = "workspace_outdated"  # a template admin asked its owner to update it
EVENTS = {
    BUILD_FAILED: "A build of my workspace failed",
    WORKSPACE_AUTOSTOPPED: "My workspace was stopped on schedule",
    WORKSPACE_AUTOSTARTED: "My workspace was started on schedule",
    WORKSPACE_AUTOUPDATED: "My workspace was updated to a new template version",
    DORMANCY_WARNING: "My workspace will go dormant within 24 hours",
    WORKSPACE_DORMANT: "My workspace was marked dormant",
    DELETION_WARNING: "My dormant workspace will be deleted within 24 hours",
    WORKSPACE_DELETED: "My workspace was deleted automatically",
    WORKSPACE_OUTDATED: "A template admin asks me to update my outdated workspace",
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
    if not _wanted(user_id, event):
        return None
    if dedupe_key is not None and db.session.scalar(
        select(Notification.id).where(Notification.dedupe_key == dedupe_key)
    ):
        return None
    notification = Notification(
        user_id=user_id, event=event, title=title[:200], body=body, link=link, workspace_id=workspace_id,
        dedupe_key=dedupe_key,
    )  # fmt: skip
    db.session.add(notification)
    for channel in channels(current_app.config["SLIPWAY_SETTINGS"]):
        db.session.add(NotificationDelivery(notification=notification, channel=channel))
    return notification


def channels(settings: Settings) -> list[str]:
    """The delivery channels this deployment has configured (the inbox is always there)."""
    return [
        name
        for name, configured in (("email", settings.email_smarthost), ("webhook", settings.notifications_webhook_url))
        if configured
    ]


# Read once per person per session (a tick may tell one person about many workspaces); changed by set_preferences.
_CACHE_KEY = "slipway_notification_preferences"


def _wanted(user_id: str, event: str) -> bool:
    cache: dict[str, dict[str, bool]] = db.session.info.setdefault(_CACHE_KEY, {})
    if user_id not in cache:
        cache[user_id] = preferences(user_id)
    return cache[user_id].get(event, True)


def preferences(user_id: str) -> dict[str, bool]:
    rows = db.session.execute(
        select(NotificationPreference.event, NotificationPreference.enabled).where(
            NotificationPreference.user_id == user_id
        )
    )
    stored = {event: enabled for event, enabled in rows}
    return {event: stored.get(event, True) for event in EVENTS}


def set_preferences(user_id: str, body: Mapping[str, JSON]) -> dict[str, bool]:
    """``{event: bool}``; all are checked before any is stored. A turned-off event is neither in the inbox nor sent."""
    problems = [
        {"field": event, "detail": "Not a notification event." if event not in EVENTS else "Must be true or false."}
        for event, value in body.items()
        if event not in EVENTS or not isinstance(value, bool)
    ]
    if problems:
        raise InvalidInput("Some notification preferences are invalid.", validations=problems)
    for event, value in body.items():
        row = db.session.get(NotificationPreference, (user_id, event))
        if row is None:
            db.session.add(NotificationPreference(user_id=user_id, event=event, enabled=bool(value)))
        else:
            row.enabled = bool(value)
    db.session.commit()
    db.session.info.pop(_CACHE_KEY, None)
    return preferences(user_id)


def inbox_query(user_id: str) -> Select[Notification]:
    """All of one person's notifications, newest first (then by id, so that pages never overlap)."""
    return (
        select(Notification)
        .where(Notification.user_id == user_id)
        .order_by(Notification.created_at.desc(), Notification.id)
    )


def inbox(user_id: str) -> list[Notification]:
    """The newest ``INBOX_SIZE``: what the inbox shows when not asked for a page."""
    return list(db.session.scalars(inbox_query(user_id).limit(INBOX_SIZE)))


def mark_read(user_id: str, notification_id: str | None) -> None:
    """One of the person's notifications (404 for anyone else's), or all of them when ``notification_id`` is None."""
    query = update(Notification).where(Notification.user_id == user_id, Notification.read_at.is_(None))
    if notification_id is not None:
        notification = db.session.get(Notification, notification_id)
        if notification is None or notification.user_id != user_id:
            raise NotFound("No such notification.")
        query = query.where(Notification.id == notification_id)
    db.session.execute(query.values(read_at=utcnow()).execution_options(synchronize_session=False))
    db.session.commit()
