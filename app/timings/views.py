"""The waterfall on a build's and an import's page: rendered with the page, and again (htmx) when a running job
ends."""

from __future__ import annotations

from flask import render_template
from markupsafe import Markup
from sqlalchemy import select

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.catalog.models import TemplateVersion
from app.catalog.services import get_version_for
from app.core.errors import NotFound
from app.core.extensions import db
from app.provisioning.models import ProvisionerJob
from app.timings.services import job_timings
from app.timings.waterfall import waterfall
from app.users.models import User
from app.workspaces.models import WorkspaceBuild
from app.workspaces.services import get_build_for

bp = page_blueprint("timings", __name__)
# While the job runs its page streams the log; the chart comes when the stream ends.
LIVE_STATUSES = ("pending", "running", "canceling")


def render_job_timings(job: ProvisionerJob, title: str) -> Markup:
    """A job page's timings section (a JobSection: the viewer already may read the job). A build's has its agents'
    connection and scripts too."""
    live = job.status in LIVE_STATUSES
    chart = None if live else waterfall(job_timings(job, with_agents=job.type == "workspace_build"))
    page = render_template("timings/_partials/waterfall.html", job=job, title=title, chart=chart)
    return Markup(page)  # noqa: S704 - the template's own output, escaped there


@bp.get("/jobs/<job_id>/timings")
def job_timings_fragment(job_id: str) -> Markup:
    return render_job_timings(*_readable_job(page_user(), job_id))


def _readable_job(user: User, job_id: str) -> tuple[ProvisionerJob, str]:
    """A build's job for whoever may read the build; an import's for those who administer its template (as its
    page); with what its page calls it."""
    build_id = db.session.scalar(select(WorkspaceBuild.id).where(WorkspaceBuild.job_id == job_id))
    if build_id is not None:
        build = get_build_for(user, build_id)
        return build.job, build_title(build)
    version_id = db.session.scalar(select(TemplateVersion.id).where(TemplateVersion.job_id == job_id))
    if version_id is None:
        raise NotFound("No such job.")
    version = get_version_for(user, version_id, "admin")
    return version.job, import_title(version)


def build_title(build: WorkspaceBuild) -> str:
    return f"build #{build.build_number}"


def import_title(version: TemplateVersion) -> str:
    return f"the import of {version.name}"
