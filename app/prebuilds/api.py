"""README "Prebuilt workspaces": ``GET/PUT /api/v2/prebuilds/settings`` (Coder's, pausing reconciliation) and
``GET /api/v2/prebuilds/status`` (every pool: desired, running, ready, failing and why). Owners and template
admins (auditors read)."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import require_role
from app.auth.blueprints import api_blueprint
from app.core.validation import json_body
from app.prebuilds import services
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN

bp = api_blueprint("prebuilds_api", __name__)


@bp.get("/prebuilds/settings")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def get_settings() -> Response:
    """Whether the reconciler is paused (``reconciliation_paused``)."""
    return jsonify(services.settings_json())


@bp.put("/prebuilds/settings")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def update_settings() -> Response:
    """Pause (``{"reconciliation_paused": true}``) or resume the reconciler: paused, it creates and deletes no
    prebuilds; people still claim the ready ones."""
    return jsonify(services.update_settings(json_body()))


@bp.get("/prebuilds/status")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def status() -> Response:
    """The settings and every pool (a preset of a template's active version that wants prebuilds)."""
    return jsonify(services.status_json())
