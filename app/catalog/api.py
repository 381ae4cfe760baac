"""API.md "Templates": archive upload, versions (import jobs), templates."""

from __future__ import annotations

from collections.abc import Sequence

from flask import Response, jsonify, request

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.catalog import access, admin, services, storage
from app.catalog.access import TemplateNeed
from app.catalog.models import TemplateVersion
from app.catalog.presets import preset_json
from app.catalog.search import listed_templates
from app.core.errors import Forbidden, InvalidInput, NotFound, TooLarge
from app.core.pagination import PageRequest, with_total
from app.core.validation import FieldErrors, json_body, name_values, string_field, string_map_field
from app.externalauth import services as external_auth
from app.files.services import MAX_ARCHIVE_BYTES, usable_file
from app.organizations.services import get_organization, is_member
from app.provisioning.jobs import cancel_job
from app.provisioning.log_api import logs_response
from app.provisioning.presenter import jobs_json
from app.resources.presenter import resource_json
from app.resources.services import job_resources
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from protocol.codec import JsonObject

bp = api_blueprint("catalog_api", __name__)
ADMINS = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN)


@bp.post("/files")
def upload_file() -> tuple[Response, int]:
    access.require_author(api_user())
    # A little headroom so an archive just over the limit gets our message rather than a bare 413.
    request.max_content_length = MAX_ARCHIVE_BYTES + 1024
    if request.content_length is not None and request.content_length > MAX_ARCHIVE_BYTES:
        raise TooLarge(f"The archive is larger than {MAX_ARCHIVE_BYTES // (1024 * 1024)} MiB.")
    stored = storage.store_archive(api_user(), request.get_data(cache=False), storage.configured_quota())
    return jsonify({"id": stored.id, "hash": stored.sha256}), 201


@bp.get("/files/<file_id>")
@require_role(*ADMINS)
def download_file(file_id: str) -> Response:
    """A template archive as uploaded (``templates pull``); 409 once it was freed."""
    stored = usable_file(file_id)
    return Response(stored.data, mimetype=stored.mimetype or "application/x-tar")


@bp.get("/users/me/template-storage")
def template_storage() -> Response:
    """What the caller's template archives take of their quota (``quota_bytes`` 0: no limit)."""
    access.require_author(api_user())
    return jsonify(storage.storage_usage(api_user(), storage.configured_quota()).to_json())


def versions_json(versions: Sequence[TemplateVersion]) -> list[JsonObject]:
    jobs = jobs_json([version.job for version in versions])
    return [{**version.to_json(), "job": jobs[version.job_id]} for version in versions]


def version_json(version: TemplateVersion) -> JsonObject:
    return versions_json([version])[0]


@bp.post("/templateversions")
def create_version() -> tuple[Response, int]:
    """A template's own admins push to it; only owners and template admins push what becomes a new template."""
    return _create_version(None)


@bp.post("/organizations/<organization>/templateversions")
def create_organization_version(organization: str) -> tuple[Response, int]:
    """Coder's path: a version imported (and a new template published) in that organisation, by its daemons."""
    return _create_version(_organization_of_caller(organization))


def _organization_of_caller(organization: str) -> str:
    """The id of ``organization`` (by name or id) when the caller belongs to it (owners: any); else it does not
    exist for them (404)."""
    user = api_user()
    found = get_organization(organization)
    if not user.is_owner and not is_member(found.id, user.id):
        raise NotFound(f"No organisation {organization!r}.")
    return found.id


def _create_version(organization_id: str | None) -> tuple[Response, int]:
    access.require_author(api_user())
    body, errors = json_body(), FieldErrors()
    file_id = string_field(body, "file_id", errors)
    template_id = string_field(body, "template_id", errors, required=False) or None
    name = string_field(body, "name", errors, required=False)
    tags = string_map_field(body, "provisioner_tags", errors)
    values = name_values(body, "user_variable_values", errors)
    message = string_field(body, "message", errors, required=False)
    errors.raise_if_any()
    version = services.create_version(
        api_user(), file_id, template_id=template_id, name=name, provisioner_tags=tags, user_variable_values=values,
        message=message, organization_id=organization_id,
    )  # fmt: skip
    return jsonify(version_json(version)), 201


def _readable_version(version_id: str, need: TemplateNeed = "use") -> TemplateVersion:
    """Those who may use its template read what they build from (parameters, resources); its import internals
    (variables, logs) and changes need ``admin``."""
    return services.get_version_for(api_user(), version_id, need)


@bp.get("/templateversions/<version_id>")
def get_version(version_id: str) -> Response:
    return jsonify(version_json(_readable_version(version_id)))


@bp.get("/templateversions/<version_id>/parameters")
def version_parameters(version_id: str) -> Response:
    return jsonify([parameter.to_json() for parameter in _readable_version(version_id).parameters])


@bp.get("/templateversions/<version_id>/presets")
def version_presets(version_id: str) -> Response:
    version = _readable_version(version_id)
    return jsonify([preset_json(version, preset) for preset in version.presets])


@bp.get("/templateversions/<version_id>/external-auth")
def version_external_auth(version_id: str) -> Response:
    return jsonify(external_auth.needs_status(api_user(), _readable_version(version_id).external_auth))


@bp.get("/templateversions/<version_id>/variables")
def version_variables(version_id: str) -> Response:
    return jsonify(services.public_variables(_readable_version(version_id, "admin")))


@bp.get("/templateversions/<version_id>/resources")
def version_resources(version_id: str) -> Response:
    version = _readable_version(version_id)
    return jsonify([resource_json(resource) for resource in job_resources(version.job_id, "start")])


@bp.get("/templateversions/<version_id>/logs")
def version_logs(version_id: str) -> Response:
    return logs_response(_readable_version(version_id, "admin").job)


@bp.patch("/templateversions/<version_id>/cancel")
def cancel_version(version_id: str) -> Response:
    version = _readable_version(version_id, "admin")
    cancel_job(version.job)
    return jsonify(version_json(version))


@bp.post("/templateversions/<version_id>/archive")
def archive_version(version_id: str) -> Response:
    return jsonify(version_json(storage.archive_version(_readable_version(version_id, "admin"))))


@bp.post("/templateversions/<version_id>/unarchive")
def unarchive_version(version_id: str) -> Response:
    """409 when its archive was freed meanwhile; 413 when it would take its creator over their storage quota."""
    return jsonify(version_json(admin.unarchive_version(_readable_version(version_id, "admin"))))


@bp.post("/templates")
def create_template() -> tuple[Response, int]:
    """Owners and template admins, and organisations' template admins (in their organisation: the version's)."""
    return _create_template("")


@bp.post("/organizations/<organization>/templates")
def create_organization_template(organization: str) -> tuple[Response, int]:
    """Coder's path: the template made in that organisation, from a version imported there."""
    return _create_template(_organization_of_caller(organization))


def _create_template(organization_id: str) -> tuple[Response, int]:
    if not access.administers_any(api_user(), organizations_only=True):
        raise Forbidden("Only owners, template admins and organisations' template admins create templates.")
    body, errors = json_body(), FieldErrors()
    name = string_field(body, "name", errors)
    version_id = string_field(body, "version_id", errors)
    display_name = string_field(body, "display_name", errors, required=False)
    description = string_field(body, "description", errors, required=False)
    errors.raise_if_any()
    template = services.create_template(api_user(), name, version_id, display_name, description, organization_id)
    return jsonify(template.to_json()), 201


@bp.get("/templates")
def list_templates() -> Response:
    """``?q=`` Coder's template filter (a name, exact_name:, deprecated:), ``?sort=`` name, created, updated (``-``
    reverses), ``?name=`` the one template so called."""
    args = request.args
    query = listed_templates(api_user(), args.get("q", ""), args.get("sort", ""), name=args.get("name"))
    templates, total = PageRequest.from_args().rows(query)
    return with_total(jsonify([template.to_json() for template in templates]), total)


@bp.get("/organizations/<org>/templates/<name>")
def template_by_name(org: str, name: str) -> Response:
    """Coder's TemplateByName: names are unique within an organisation (``{org}``: an id, a name or ``default``)."""
    return jsonify(services.get_template_by_name_for(api_user(), name, organization=get_organization(org)).to_json())


@bp.get("/templates/<template_id>")
def get_template(template_id: str) -> Response:
    return jsonify(services.get_template_for(api_user(), template_id).to_json())


@bp.delete("/templates/<template_id>")
def delete_template(template_id: str) -> tuple[str, int]:
    """204; 409 naming the workspaces while any uses the template."""
    admin.delete_template(services.get_template_for(api_user(), template_id, "admin"))
    return "", 204


@bp.get("/templates/<template_id>/versions")
def list_versions(template_id: str) -> Response:
    template = services.get_template_for(api_user(), template_id)
    versions, total = PageRequest.from_args(after_id=True).rows(services.versions_query(template))
    return with_total(jsonify(versions_json(versions)), total)


@bp.get("/templates/<template_id>/versions/<version_name>")
def version_by_name(template_id: str, version_name: str) -> Response:
    template = services.get_template_for(api_user(), template_id)
    return jsonify(version_json(services.get_version_by_name(template, version_name)))


@bp.post("/templates/<template_id>/versions/archive")
def archive_versions(template_id: str) -> Response:
    """Coder's bulk archive: the failed versions, or with ``{"all": true}`` every unused one."""
    body = json_body()
    everything = body.get("all", False)
    if not isinstance(everything, bool):
        raise InvalidInput("Invalid request.", validations=[{"field": "all", "detail": "Must be true or false."}])
    template = services.get_template_for(api_user(), template_id, "admin")
    archived = admin.archive_unused_versions(template, everything_unused=everything)
    return jsonify({"template_id": template.id, "archived_ids": [version.id for version in archived]})


@bp.patch("/templates/<template_id>/versions")
def promote_version(template_id: str) -> Response:
    template = services.get_template_for(api_user(), template_id, "admin")
    body, errors = json_body(), FieldErrors()
    version_id = string_field(body, "id", errors)
    errors.raise_if_any()
    return jsonify(services.promote_version(template, version_id).to_json())
