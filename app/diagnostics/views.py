"""``/api/v2/debug/health`` (and its settings), the WebSocket echo it checks with, and the Health page."""

from __future__ import annotations

import time

from flask import Flask, Response, jsonify, render_template, request
from flask_login import current_user

from app.audit.recorder import ACTION_WRITE, change, record
from app.auth.access import require_role
from app.auth.blueprints import api_blueprint, page_blueprint
from app.core.errors import InvalidInput, Unauthorized
from app.core.extensions import db
from app.core.validation import json_body
from app.core.websocket import WebSocket, serve_websocket
from app.diagnostics import checks
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN

api = api_blueprint("debug_api", __name__, public=("websocket_echo",))
bp = page_blueprint("health_page", __name__)
ADMINS = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN)


@api.get("/debug/health")
@require_role(*ADMINS)
def health() -> Response:
    return jsonify(checks.report(force=request.args.get("force", "").lower() in ("1", "true")))


@api.get("/debug/health/settings")
@require_role(*ADMINS)
def health_settings() -> Response:
    return jsonify({"dismissed_healthchecks": checks.dismissed_sections()})


@api.put("/debug/health/settings")
@require_role(ROLE_OWNER)
def set_health_settings() -> Response:
    names = json_body().get("dismissed_healthchecks")
    if not isinstance(names, list) or any(name not in checks.SECTIONS for name in names):
        detail = f"dismissed_healthchecks is a list of sections: {', '.join(checks.SECTIONS)}"
        raise InvalidInput(detail, validations=[{"field": "dismissed_healthchecks", "detail": detail}])
    before = checks.dismissed_sections()
    dismissed = checks.set_dismissed([str(name) for name in names])
    # Kept in Redis, not in a row: recorded explicitly (an owner silencing a check is worth knowing).
    record("health_settings", "", "", ACTION_WRITE, {"dismissed_healthchecks": change(dismissed, before)})
    db.session.commit()
    checks.run_report()
    return jsonify({"dismissed_healthchecks": dismissed})


@api.get("/debug/ws", websocket=True)
def websocket_echo() -> Response:
    """The health check's WebSocket: one message echoed. It opens only with the server's own short-lived
    signature, so it is no open relay."""
    expires = request.args.get("expires", "")
    signature = request.args.get("signature", "")
    if not expires.isdecimal() or int(expires) < time.time() or not checks.ws_signature(expires) == signature:
        raise Unauthorized("This WebSocket is for the server's own health check.")

    def echo(websocket: WebSocket) -> None:
        message = websocket.receive(timeout=checks.CHECK_TIMEOUT)
        if message is not None:
            websocket.send(message)

    return serve_websocket(echo)


@bp.get("/health")
@require_role(*ADMINS)
def page() -> str:
    report = checks.report(force=request.args.get("force") == "1")
    return render_template("diagnostics/health.html", report=report, sections=checks.SECTIONS)


def init_app(app: Flask) -> None:
    @app.context_processor
    def health_dot() -> dict[str, object]:
        """Admins see a red dot on Health when the last report found something (read from Redis, never run)."""
        if not current_user.is_authenticated or not (current_user.is_template_admin or current_user.is_auditor):
            return {}
        return {"health_severity": checks.cached_severity()}
