from __future__ import annotations

from flask import render_template

from app.blueprints import page_blueprint

bp = page_blueprint("catalog", __name__)


@bp.get("/templates")
def index() -> str:
    return render_template("catalog/index.html", templates=[])
