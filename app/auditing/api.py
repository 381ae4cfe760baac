"""``GET /api/v2/audit?q=`` (Coder's shape, keyset paged), its export, and the chain's verification."""

from __future__ import annotations

from flask import Response, jsonify, request, stream_with_context

from app.audit import query
from app.auditing import services
from app.auth.access import require_role
from app.auth.blueprints import api_blueprint
from app.core.errors import InvalidInput
from app.core.validation import query_int
from app.users.models import ROLE_OWNER

bp = api_blueprint("audit_api", __name__)


@bp.get("/audit")
@require_role(ROLE_OWNER)
def list_entries() -> Response:
    """Newest first; ``?limit=`` (1-1000, default 25) and ``?before=<id>`` (the previous page's
    ``next_before``)."""
    wanted = query.parse_filter(request.args.get("q", ""))
    limit = query_int("limit", query.DEFAULT_LIMIT, minimum=1, maximum=query.MAX_LIMIT)
    before = query_int("before", 0, minimum=0) or None
    found = query.page(wanted, limit=limit, before=before)
    return jsonify(
        {"audit_logs": [query.entry_json(entry) for entry in found.entries], "next_before": found.next_before}
    )


def export_response(fmt: str) -> Response:
    if fmt not in services.EXPORT_FORMATS:
        raise InvalidInput(f"format: one of {', '.join(services.EXPORT_FORMATS)}.")
    wanted = query.parse_filter(request.args.get("q", ""))
    mimetype = "text/csv" if fmt == "csv" else "application/x-ndjson"
    response = Response(stream_with_context(services.export_lines(wanted, fmt)), mimetype=mimetype)
    response.headers["Content-Disposition"] = f'attachment; filename="audit.{fmt}"'
    return response


@bp.get("/audit/export")
@require_role(ROLE_OWNER)
def export() -> Response:
    """``?format=csv|ndjson`` and the same ``?q=``: every matching entry, streamed."""
    return export_response(request.args.get("format", "ndjson"))


@bp.get("/audit/verify")
@require_role(ROLE_OWNER)
def verify() -> Response:
    return jsonify(services.verify_chain().to_json())
