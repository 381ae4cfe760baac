"""API.md "Workspace lifecycle": the inbox, notification preferences, and (owners) deliveries that fail."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.core.errors import NotFound
from app.core.extensions import db
from app.core.pagination import PageRequest, with_total
from app.core.validation import json_body
from app.notifications import delivery, services
from app.notifications.models import NotificationDelivery
from app.users.models import ROLE_OWNER

bp = api_blueprint("notifications_api", __name__)


@bp.get("/notifications/inbox")
def inbox() -> Response:
    """The newest 100 unless another page is asked for; ``X-Total-Count`` counts the whole inbox."""
    notifications, total = PageRequest.from_args().rows(services.inbox_query(api_user().id))
    return with_total(jsonify([notification.to_json() for notification in notifications]), total)


@bp.put("/notifications/inbox/<notification_id>/read")
def mark_read(notification_id: str) -> tuple[str, int]:
    services.mark_read(api_user().id, notification_id)
    return "", 204


@bp.put("/notifications/inbox/read")
def mark_all_read() -> tuple[str, int]:
    services.mark_read(api_user().id, None)
    return "", 204


@bp.get("/users/me/notifications/preferences")
def preferences() -> Response:
    return jsonify(services.preferences(api_user().id))


@bp.put("/users/me/notifications/preferences")
def set_preferences() -> Response:
    return jsonify(services.set_preferences(api_user().id, json_body()))


@bp.get("/notifications/deliveries")
@require_role(ROLE_OWNER)
def failing_deliveries() -> Response:
    """The newest 100 unless another page is asked for; ``X-Total-Count`` counts them all."""
    rows, total = PageRequest.from_args().rows(delivery.failing_deliveries_query())
    return with_total(jsonify([row.to_json() for row in rows]), total)


@bp.post("/notifications/deliveries/<delivery_id>/retry")
@require_role(ROLE_OWNER)
def retry_delivery(delivery_id: str) -> Response:
    row = db.session.get(NotificationDelivery, delivery_id)
    if row is None:
        raise NotFound("No such delivery.")
    delivery.retry(row)
    return jsonify(row.to_json())
