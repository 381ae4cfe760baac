from __future__ import annotations

from flask import redirect, render_template, url_for
from werkzeug.wrappers import Response

from app.blueprints import page_blueprint

bp = page_blueprint("workspaces", __name__)


@bp.get("/")
def home() -> Response:
    return redirect(url_for("workspaces.index"))


@bp.get("/workspaces")
def index() -> str:
    return render_template("workspaces/index.html", workspaces=[])
