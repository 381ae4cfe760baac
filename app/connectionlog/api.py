"""``GET /api/v2/connectionlog?q=&limit=&offset=``: Coder's shape, for owners and auditors."""

from __future__ import annotations

from flask import Response, jsonify, request

from app.auth.access import require_role
from app.auth.blueprints import api_blueprint
from app.connectionlog.presenter import connection_json
from app.connectionlog.search import log_query
from app.core.extensions import db
from app.core.pagination import PageRequest, count_rows, with_total
from app.users.models import ROLE_AUDITOR, ROLE_OWNER

bp = api_blueprint("connectionlog_api", __name__)
COUNT_CAP = 10_000


@bp.get("/connectionlog")
@require_role(ROLE_OWNER, ROLE_AUDITOR)
def connection_log() -> Response:
    page, query = PageRequest.from_args(), log_query(request.args.get("q", ""))
    # Counted no further than COUNT_CAP: an exact count of a year of connections is a scan of millions of rows on
    # every call. Past it, ``count`` is the cap and ``count_capped`` says there are more (as big UIs say "10,000+").
    total = count_rows(query, at_most=COUNT_CAP + 1)
    capped = total > COUNT_CAP
    total = min(total, COUNT_CAP)
    rows = db.session.scalars(query.offset(page.offset).limit(page.limit))
    body = {"connection_logs": [connection_json(row) for row in rows], "count": total, "count_capped": capped}
    return with_total(jsonify(body), total)
