"""Sending notifications by email (SMTP) and webhook, as RQ jobs of the notification worker (app/server/notifier.py).

The database is the outbox: each delivery row stays ``pending`` until it is sent. The maintenance loop enqueues
the pending rows whose time has come (:func:`enqueue_due`), the worker tries each once (:func:`deliver`), and a
failure sets the next try with exponential back-off (10 s, 20 s, … at most an hour apart). A delivery still
failing a day after its event is marked ``failed``, which admins see (and can retry). Nothing is lost while an
SMTP server or a webhook receiver is down, nor when Redis is restarted: the rows are re-enqueued.

Webhook receivers check ``X-Slipway-Signature: sha256=<hex>``, the HMAC-SHA256 of the raw body with the shared
secret; the body carries the event's id and time, so a replayed delivery is recognisable.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import smtplib
import ssl
from datetime import datetime, timedelta
from email.message import EmailMessage

import httpx
from flask import current_app
from rq import Queue
from rq.serializers import JSONSerializer
from sqlalchemy import Select, select
from sqlalchemy.orm import joinedload

from app.core.columns import rfc3339, utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.notifications.models import FAILED, PENDING, SENT, Notification, NotificationDelivery
from app.users.models import User

log = logging.getLogger("slipway.notifications")

QUEUE = "slipway-notifications"
DELIVER_FUNCTION = "app.notifications.delivery.deliver"
FIRST_RETRY = timedelta(seconds=10)
LONGEST_RETRY = timedelta(hours=1)
GIVE_UP_AFTER = timedelta(hours=24)
SEND_TIMEOUT_SECONDS = 20
ENQUEUE_BATCH = 500
SIGNATURE_HEADER = "X-Slipway-Signature"


class DeliveryError(Exception):
    """Why a delivery did not go through, in words safe to store and show to admins (no secrets)."""


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failure: 10 s doubling, at most an hour."""
    wait: timedelta = FIRST_RETRY * (2 ** max(0, attempts - 1))
    return min(wait, LONGEST_RETRY)


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def enqueue_due(settings: Settings, now: datetime | None = None) -> int:
    """A maintenance task: hand the deliveries whose time has come to the worker (again, if Redis lost them)."""
    rows = db.session.execute(
        select(NotificationDelivery.id, NotificationDelivery.attempts)
        .where(NotificationDelivery.status == PENDING, NotificationDelivery.next_attempt_at <= (now or utcnow()))
        .order_by(NotificationDelivery.next_attempt_at)
        .limit(ENQUEUE_BATCH)
    ).all()
    if not rows:
        return 0
    queue = Queue(QUEUE, connection=get_redis(), serializer=JSONSerializer)
    # One RQ job per try: the same id while a try waits in the queue, so passes that overlap do not double it.
    queue.enqueue_many(
        [
            Queue.prepare_data(
                DELIVER_FUNCTION,
                (delivery_id,),
                job_id=f"delivery-{delivery_id}-{attempts}",
                result_ttl=0,
                failure_ttl=3600,
                timeout=SEND_TIMEOUT_SECONDS * 3,
            )  # fmt: skip
            for delivery_id, attempts in rows
        ]
    )
    return len(rows)


def deliver(delivery_id: str) -> str:
    """The RQ job: try one delivery once and record the outcome. Never raises for a failed send: the table, not
    RQ, decides when to try again."""
    try:
        delivery = db.session.get(NotificationDelivery, delivery_id)
        if delivery is None or delivery.status != PENDING:
            return "gone"
        notification = delivery.notification
        user = db.session.get(User, notification.user_id)
        settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
        now = utcnow()
        try:
            if user is None:
                raise DeliveryError("the person was deleted")
            send(settings, delivery.channel, notification, user)
        except DeliveryError as exc:
            delivery.attempts += 1
            delivery.last_error = str(exc)[:1000]
            if now - delivery.created_at >= GIVE_UP_AFTER:
                delivery.status = FAILED
                log.warning("notification %s by %s failed for good: %s", notification.id, delivery.channel, exc)
            else:
                delivery.next_attempt_at = now + backoff(delivery.attempts)
            db.session.commit()
            return "retry"
        delivery.attempts += 1
        delivery.status, delivery.sent_at, delivery.last_error = SENT, now, ""
        db.session.commit()
        return "sent"
    finally:
        db.session.remove()


def send(settings: Settings, channel: str, notification: Notification, user: User) -> None:
    if channel == "email":
        send_email(settings, notification, user)
    elif channel == "webhook":
        send_webhook(settings, notification, user)
    else:
        raise DeliveryError(f"unknown channel {channel!r}")


def _link(settings: Settings, notification: Notification) -> str:
    return settings.access_url.rstrip("/") + notification.link if notification.link else settings.access_url


def send_email(settings: Settings, notification: Notification, user: User) -> None:
    send_mail(settings, user.email, notification.title, f"{notification.body}\n\n{_link(settings, notification)}\n")


def send_mail(settings: Settings, to: str, subject: str, text: str) -> None:
    """One plain-text email through the configured smarthost (notifications, invitations, password resets)."""
    if not settings.email_smarthost:
        raise DeliveryError("email is not configured on this server (--email-smarthost)")
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = settings.email_from
    message["To"] = to
    message.set_content(text.lstrip())
    host, _, port = settings.email_smarthost.rpartition(":")
    try:
        if settings.email_tls:
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                host, int(port), timeout=SEND_TIMEOUT_SECONDS, context=ssl.create_default_context()
            )
        else:
            smtp = smtplib.SMTP(host, int(port), timeout=SEND_TIMEOUT_SECONDS)
        with smtp:
            if settings.email_starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.email_username:
                smtp.login(settings.email_username, settings.email_password)
            smtp.send_message(message)
    except smtplib.SMTPResponseException as exc:
        raise DeliveryError(f"SMTP server answered {exc.smtp_code}") from None
    except (OSError, smtplib.SMTPException) as exc:
        raise DeliveryError(f"SMTP {type(exc).__name__}: {exc}"[:300]) from None


def webhook_body(notification: Notification, user: User) -> bytes:
    return json.dumps(
        {
            "id": notification.id,
            "event": notification.event,
            "title": notification.title,
            "body": notification.body,
            "link": notification.link,
            "user": {"id": user.id, "username": user.username, "email": user.email},
            "workspace_id": notification.workspace_id,
            "created_at": rfc3339(notification.created_at),
        },
        sort_keys=True,
    ).encode()


def send_webhook(settings: Settings, notification: Notification, user: User) -> None:
    if not settings.notifications_webhook_url:
        raise DeliveryError("no webhook is configured on this server (--notifications-webhook-url)")
    body = webhook_body(notification, user)
    headers = {"Content-Type": "application/json", "X-Slipway-Event": notification.event}
    if settings.notifications_webhook_secret:
        headers[SIGNATURE_HEADER] = sign(body, settings.notifications_webhook_secret)
    try:
        reply = httpx.post(
            settings.notifications_webhook_url, content=body, headers=headers, timeout=SEND_TIMEOUT_SECONDS
        )
    except httpx.HTTPError as exc:
        # The URL may carry a token: say what went wrong, never where.
        raise DeliveryError(f"webhook unreachable ({type(exc).__name__})") from None
    if not 200 <= reply.status_code < 300:
        raise DeliveryError(f"webhook answered HTTP {reply.status_code}")


FAILING_SHOWN = 200


def failing_deliveries_query() -> Select[NotificationDelivery]:
    """For admins: what has failed for good or is being retried, newest first (then by id, so that pages never
    overlap)."""
    return (
        select(NotificationDelivery)
        .where((NotificationDelivery.status == FAILED) | (NotificationDelivery.attempts > 0))
        .where(NotificationDelivery.status != SENT)
        .order_by(NotificationDelivery.created_at.desc(), NotificationDelivery.id)
    )


def failing_deliveries() -> list[NotificationDelivery]:
    """The newest ``FAILING_SHOWN`` of them: what the upcoming page, and the API unless asked for a page, show."""
    # With their notifications: the page shows each one's title.
    query = failing_deliveries_query().options(joinedload(NotificationDelivery.notification))
    return list(db.session.scalars(query.limit(FAILING_SHOWN)))


def retry(delivery: NotificationDelivery) -> None:
    """An admin's Retry: a failed (or waiting) delivery is tried again at once, and for another day (the give-up
    window counts from ``created_at``)."""
    delivery.status, delivery.next_attempt_at, delivery.created_at = PENDING, utcnow(), utcnow()
    db.session.commit()
