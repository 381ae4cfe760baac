"""README "Appearance": Coder's ``GET/PUT /api/v2/appearance``. Reading is public, as in Coder: the sign-in page
shows the name, logo and service banner before anyone has a token."""

from __future__ import annotations

from flask import Response, jsonify

from app.appearance import services
from app.auth.access import require_role
from app.auth.blueprints import api_blueprint
from app.core.validation import json_body
from app.users.models import ROLE_OWNER

bp = api_blueprint("appearance_api", __name__, public=("get_appearance",))


@bp.get("/appearance")
def get_appearance() -> Response:
    return jsonify(services.config())


@bp.put("/appearance")
@require_role(ROLE_OWNER)
def update_appearance() -> Response:
    return jsonify(services.update(json_body()))
