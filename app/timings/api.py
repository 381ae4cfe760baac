"""``GET /api/v2/workspacebuilds/{id}/timings`` and ``/templateversions/{id}/timings``: Coder's shape."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.catalog.services import get_version
from app.timings.services import job_timings, timings_json
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from app.workspaces.services import get_build_for

bp = api_blueprint("timings_api", __name__)


@bp.get("/workspacebuilds/<build_id>/timings")
def build_timings(build_id: str) -> Response:
    """Whoever may read the build may read its timings."""
    build = get_build_for(api_user(), build_id)
    return jsonify(timings_json(job_timings(build.job, with_agents=True)))


@bp.get("/templateversions/<version_id>/timings")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def version_timings(version_id: str) -> Response:
    """As the import's log: template admins' (members build from templates but do not read their imports)."""
    return jsonify(timings_json(job_timings(get_version(version_id).job)))
