"""``GET /api/v2/workspacebuilds/{id}/timings`` and ``/templateversions/{id}/timings``: Coder's shape."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.catalog.services import get_version_for
from app.timings.services import job_timings, timings_json
from app.workspaces.services import get_build_for

bp = api_blueprint("timings_api", __name__)


@bp.get("/workspacebuilds/<build_id>/timings")
def build_timings(build_id: str) -> Response:
    """Whoever may read the build may read its timings."""
    build = get_build_for(api_user(), build_id)
    return jsonify(timings_json(job_timings(build.job, with_agents=True)))


@bp.get("/templateversions/<version_id>/timings")
def version_timings(version_id: str) -> Response:
    """As the import's log: for those who administer the template (members build from it but do not read its
    imports)."""
    return jsonify(timings_json(job_timings(get_version_for(api_user(), version_id, "admin").job)))
