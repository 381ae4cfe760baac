"""``GET /api/v2/connectionlog?q=&limit=&offset=``: Coder's shape, for owners and auditors."""

from __future__ import annotations

from flask import Response, jsonify, request

from app.auth.access import require_role
from app.auth.blueprints import api_blueprint
from app.connectionlog.presenter import connection_json
from app.connectionlog.search import log_query
from app.core.pagination import PageRequest, with_total
from app.users.models import ROLE_AUDITOR, ROLE_OWNER

bp = api_blueprint("connectionlog_api", __name__)


@bp.get("/connectionlog")
@require_role(ROLE_OWNER, ROLE_AUDITOR)
def connection_log() -> Response:
    rows, total = PageRequest.from_args().rows(log_query(request.args.get("q", "")))
    body = {"connection_logs": [connection_json(row) for row in rows], "count": total}
    return with_total(jsonify(body), total)
