"""The document and its page, both public: they describe the open source server's routes and the shape of its
messages, and hold no data and no secret (Coder serves its /swagger to anyone too). A client (or a person) reads
them before having a token, to learn how to get one."""

from __future__ import annotations

from flask import Response, current_app, jsonify, render_template

from app.apidocs.document import openapi_document
from app.apidocs.reference import reference_of
from app.auth.blueprints import api_blueprint, page_blueprint

api = api_blueprint("apidocs_api", __name__, public=("openapi",))
bp = page_blueprint("apidocs", __name__, public=("page",))


@api.get("/openapi.json")
def openapi() -> Response:
    """This document: every call of the API, its credentials, parameters, bodies and answers (OpenAPI 3.1)."""
    return jsonify(openapi_document(current_app))


@bp.get("/docs/api")
def page() -> str:
    return render_template("apidocs/index.html", reference=reference_of(current_app))
