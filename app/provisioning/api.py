"""API.md "Provisioners": daemons, jobs with their queue places, and provisioner keys (owners, template admins)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from flask import Response, jsonify, request

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.core.errors import Forbidden, InvalidInput, NotFound
from app.core.pagination import PageRequest, with_total
from app.core.validation import FieldErrors, json_body, query_int, string_field, string_map_field
from app.organizations.models import DEFAULT_ORGANIZATION_ID, ORG_READERS
from app.organizations.services import get_organization, organizations_where
from app.provisioning import keys, overview
from app.provisioning.jobs import cancel_job
from app.provisioning.presenter import job_json
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN, User
from protocol.terraform_versions import ConstraintError, parse_constraints, satisfies

bp = api_blueprint("provisioners_api", __name__)
ADMINS = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN)


def _organizations_read(user: User) -> list[str] | None:
    """The organisations whose daemons and jobs ``user`` lists: every one (None) for owners, template admins and
    auditors; those where they are a template admin, an organisation admin or an auditor; else 403."""
    if user.is_template_admin or user.is_auditor:
        return None
    readable = organizations_where(user.id, ORG_READERS)
    if not readable:
        raise Forbidden("You do not have permission to do that.")
    return readable


@bp.get("/provisionerdaemons")
def list_daemons() -> Response:
    """``?tags={"env":"prod"}``: only the daemons that would take a job with those tags; ``&terraform=>= 1.12``:
    and whose Terraform satisfies that constraint. An organisation's template admins, admins and auditors see its
    daemons."""
    readable = _organizations_read(api_user())
    status, page = request.args.get("status") or None, PageRequest.from_args()
    if "tags" not in request.args and "terraform" not in request.args:
        daemons, total = page.rows(overview.daemons_query(status, readable))
        return with_total(jsonify([view.to_json() for view in overview.views_of_daemons(daemons)]), total)
    tags = _tags_query(request.args.get("tags", "{}"))
    required = request.args.get("terraform", "").strip()
    if required:
        try:
            parse_constraints(required)
        except ConstraintError as exc:
            raise InvalidInput(str(exc), validations=[{"field": "terraform", "detail": str(exc)}]) from None
    organization = get_organization(request.args.get("organization") or DEFAULT_ORGANIZATION_ID)
    if readable is not None and organization.id not in readable:
        raise NotFound(f"No organisation {organization.name!r}.")
    serving = overview.daemons_serving(tags, api_user().id, status, organization.id)
    return _daemons_page([view for view in serving if satisfies(view.daemon.terraform_version, required)], page)


def _daemons_page(views: Sequence[overview.DaemonView], page: PageRequest) -> Response:
    # Tags and Terraform constraints are judged in Python, so this page is cut after them; daemons are few (one per
    # machine), and their views cost the same few queries however many there are.
    shown, total = page.slice(views)
    return with_total(jsonify([view.to_json() for view in shown]), total)


def _tags_query(raw: str) -> dict[str, str]:
    try:
        tags = json.loads(raw or "{}")
    except ValueError:
        tags = None
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        detail = 'tags must be a JSON object of strings, e.g. {"env": "prod"}'
        raise InvalidInput(detail, validations=[{"field": "tags", "detail": detail}])
    return tags


@bp.get("/provisionerjobs")
def list_jobs() -> Response:
    """Newest first, a page at a time: ``?limit=`` (50 unless asked, at most 500) and ``?offset=`` reach every
    job, and ``X-Total-Count`` says how many there are (a smaller page than other lists': a job's view costs more).
    An organisation's template admins, admins and auditors see its jobs."""
    readable = _organizations_read(api_user())
    statuses = overview.parse_statuses(request.args.getlist("status"))
    page = overview.job_views(statuses, query_int("limit", 50, minimum=1), query_int("offset", 0), readable)
    return with_total(jsonify([view.to_json() for view in page]), overview.jobs_count(statuses, readable))


@bp.get("/provisionerjobs/<job_id>")
def get_job(job_id: str) -> Response:
    return jsonify(overview.views_of([overview.get_job_for(api_user(), job_id)])[0].to_json())


@bp.patch("/provisionerjobs/<job_id>/cancel")
def cancel(job_id: str) -> Response:
    """Cancel by job id, whatever the job is about (the CLI's `provisioner jobs cancel`)."""
    return jsonify(job_json(cancel_job(overview.get_job_for(api_user(), job_id))))


@bp.post("/provisionerkeys")
@require_role(*ADMINS)
def create_key() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    name = string_field(body, "name", errors)
    tags = string_map_field(body, "tags", errors)
    errors.raise_if_any()
    key, secret = keys.create_key(api_user(), name, tags)
    return jsonify({**key.to_json(), "key": secret}), 201


@bp.get("/provisionerkeys")
@require_role(*ADMINS)
def list_keys() -> Response:
    provisioner_keys, total = PageRequest.from_args().rows(keys.keys_query())
    return with_total(jsonify([key.to_json() for key in provisioner_keys]), total)


@bp.delete("/provisionerkeys/<name>")
@require_role(*ADMINS)
def delete_key(name: str) -> tuple[str, int]:
    keys.delete_key(name)
    return "", 204
