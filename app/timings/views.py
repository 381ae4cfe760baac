"""The waterfall on a build's page: rendered with the page, and again (htmx) when a running build ends."""

from __future__ import annotations

from flask import render_template
from markupsafe import Markup

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.timings.services import job_timings
from app.timings.waterfall import waterfall
from app.users.models import User
from app.workspaces.models import WorkspaceBuild
from app.workspaces.services import get_build_for

bp = page_blueprint("timings", __name__)
# While the build runs its page streams the log; the chart comes when the stream ends.
LIVE_STATUSES = ("pending", "running", "canceling")


def render_build_timings(build: WorkspaceBuild, user: User) -> Markup:
    """The build page's timings section (a BuildSection: the viewer already may read the build)."""
    live = build.job.status in LIVE_STATUSES
    chart = None if live else waterfall(job_timings(build.job, with_agents=True))
    return Markup(render_template("timings/_partials/waterfall.html", build=build, chart=chart))  # noqa: S704


@bp.get("/builds/<build_id>/timings")
def build_timings(build_id: str) -> Markup:
    return render_build_timings(get_build_for(page_user(), build_id), page_user())
