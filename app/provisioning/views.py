"""The Provisioners page (owners, template admins): daemons, jobs with their queue places, provisioner keys.

Also the queue notice a pending job's page polls, which members see for their own builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.auth.access import page_user, require_role
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError, InvalidInput
from app.core.pagination import Page, PagePosition, page_of, requested_page, requested_position
from app.events import get_relay
from app.events.sse import event_stream
from app.events.streams import follow_statuses, seen_token
from app.organizations.services import organization_names
from app.provisioning import keys, overview
from app.provisioning.jobs import cancel_job
from app.provisioning.models import JOB_STATUSES, PENDING
from app.provisioning.queue import QueueInfo, queue_info
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from protocol.tags import TagError, parse_tag_arguments

bp = page_blueprint("provisioners", __name__)
ADMINS = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
# Daemons send no notice when they go quiet: the page re-checks this often besides reacting to job notices.
PAGE_POLL_SECONDS = 5.0


def _page_context(**extra: Any) -> dict[str, Any]:
    daemons, jobs = _daemons_page(requested_page()), overview.admin_jobs()
    views = overview.views_of_daemons(daemons.rows)
    return {
        "daemons": views,
        "daemon_page": daemons,
        "jobs": jobs,
        "keys": page_of(
            keys.keys_query(), requested_page("keys_page"), endpoint="provisioners.index", param="keys_page"
        ),
        "stream_seen": seen_token({"refresh": _live_state(views, jobs)}),
        # With more than one organisation each daemon says whose jobs it runs.
        "organization_names": organization_names(),
        **extra,
    }


def _daemons_page(number: int) -> Page:
    """Page ``number`` of daemons (``?page=``): the page's live parts and its stream watch the same one."""
    return page_of(overview.daemons_query(), number, endpoint="provisioners.index")


def _live_state(
    daemons: list[overview.DaemonView], jobs: overview.AdminJobs
) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str, QueueInfo]], int]:
    """What the page's stream compares: each daemon's status and job, each job's status and place in its queue."""
    return (
        [(view.daemon.id, view.status, view.current_job.id if view.current_job else None) for view in daemons],
        [(view.job.id, view.job.status, view.queue) for view in jobs.shown()],
        jobs.pending_total,
    )


@bp.get("/provisioners")
@require_role(*ADMINS)
def index() -> str:
    return render_template("provisioning/index.html", **_page_context())


@bp.get("/provisioners/jobs")
@require_role(*ADMINS)
def jobs() -> tuple[str, int]:
    """Every job, newest first, a page at a time; ``?status=`` picks one status (the jobs API's filter)."""
    status = request.args.get("status", "").strip()
    try:
        page, error = _jobs_page(overview.parse_statuses([status]), requested_position()), ""
    except InvalidInput as exc:  # a hand-edited address: the page says which statuses there are
        page, error = Page.empty(), exc.message
    context = {"page": page, "views": overview.views_of(page.rows), "status": status, "error": error}
    context.update(statuses=JOB_STATUSES, stream_seen=seen_token({"refresh": _jobs_state(page)}))
    return render_template("provisioning/jobs.html", **context), 400 if error else 200


@bp.get("/provisioners/jobs/events")
@require_role(*ADMINS)
def jobs_events() -> Response:
    """`refresh` when a job on the jobs page's page (?page=, ?status=) changes status, or the list moves on."""
    # A status that does not parse is refused here (400), before the stream starts.
    statuses, position = overview.parse_statuses([request.args.get("status", "").strip()]), requested_position()

    def live_state() -> object:
        return _jobs_state(_jobs_page(statuses, position))

    return event_stream(follow_statuses(get_relay(), live_state, seen=request.args.get("seen")))


def _jobs_page(statuses: Sequence[str], position: PagePosition) -> Page:
    # Counted only ten pages ahead: every build and import is a job, and an exact count would grow with all of them.
    return page_of(overview.all_jobs_query(statuses), position, pages_ahead=10)


def _jobs_state(page: Page) -> tuple[list[tuple[str, str]], int]:
    """What the jobs page's stream compares: its jobs and their statuses, and how many there are in all."""
    return [(job.id, job.status) for job in page.rows], page.total


@bp.get("/provisioners/overview")
@require_role(*ADMINS)
def live_overview() -> str:
    """The live part of the page (daemons and jobs), re-read when the page's stream says it changed."""
    return render_template("provisioning/_partials/overview.html", **_page_context())


@bp.get("/provisioners/events")
@require_role(*ADMINS)
def events() -> Response:
    number = requested_page()

    def live_state() -> object:
        daemons = _daemons_page(number)
        return _live_state(overview.views_of_daemons(daemons.rows), overview.admin_jobs())

    seen = request.args.get("seen")
    return event_stream(follow_statuses(get_relay(), live_state, poll_seconds=PAGE_POLL_SECONDS, seen=seen))


@bp.post("/provisioners/keys")
@require_role(*ADMINS)
def create_key() -> str | tuple[str, int]:
    name = request.form.get("name", "")
    try:
        try:
            tags = parse_tag_arguments(request.form.get("tags", "").split())
        except TagError as exc:
            raise InvalidInput(str(exc)) from exc
        key, secret = keys.create_key(page_user(), name, tags)
    except DomainError as error:
        details = "; ".join(item["detail"] for item in error.validations)
        message = f"{error.message} {details}".strip()
        form = {"name": name, "tags": request.form.get("tags", "")}
        return render_template("provisioning/index.html", **_page_context(key_error=message, key_form=form)), 400
    return render_template("provisioning/index.html", **_page_context(new_key=key, new_secret=secret))


@bp.post("/provisioners/keys/<name>/delete")
@require_role(*ADMINS)
def delete_key(name: str) -> Response:
    keys.delete_key(name)
    flash(f"Deleted provisioner key {name}. Daemons using it stop at their next call.", "success")
    return redirect(url_for("provisioners.index"))


@bp.post("/provisioners/jobs/<job_id>/cancel")
def cancel(job_id: str) -> Response:
    """Members may cancel their own builds here too; the page they came from is where they go back to."""
    job = cancel_job(overview.get_job_for(page_user(), job_id))
    flash(f"Job {job.id[:8]} is {job.status}.", "success")
    back = request.form.get("next", "")
    return redirect(back if back.startswith("/") and not back.startswith("//") else url_for("provisioners.index"))


@bp.get("/jobs/<job_id>/queue")
def queue_notice(job_id: str) -> str:
    """Where a pending job stands, polled by its page until a daemon takes it."""
    job = overview.get_job_for(page_user(), job_id)
    info = queue_info(job)
    return render_template(
        "provisioning/_partials/queue_notice.html",
        job_id=job.id,
        pending=job.status == PENDING,
        tags=job.tags,
        position=info.position,
        size=info.size,
        available=info.available,
        needs_terraform=info.needs_terraform,
    )
