"""Template pages: the catalog, a template with its versions, uploading a version, and the import log."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask_wtf.csrf import generate_csrf
from werkzeug.datastructures import FileStorage
from werkzeug.wrappers import Response

from app.auth.access import page_user, require_role
from app.auth.blueprints import page_blueprint
from app.catalog import access, acl, admin, services, storage
from app.catalog import source as catalog_source
from app.catalog.models import Template, TemplateVersion
from app.catalog.page_sections import template_sections
from app.catalog.search import listed_templates
from app.core.errors import Conflict, DomainError, Forbidden, InvalidInput, NotFound
from app.core.extensions import db
from app.core.markdown_render import render_markdown
from app.core.pagination import Page, page_of, requested_page
from app.core.templating import tar_of_uploads
from app.events import get_relay
from app.events.sse import event_stream
from app.events.streams import follow_statuses, seen_token
from app.externalauth import services as external_auth
from app.files.services import MAX_ARCHIVE_BYTES
from app.organizations.services import get_organization, organization_names
from app.provisioning import overview
from app.provisioning.log_html import log_page_context, page_stream, retry_from_form
from app.provisioning.models import ProvisionerJob
from app.provisioning.sections import job_sections
from app.resources.services import job_resources
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from protocol.provisionerd import NameValue
from protocol.tags import TagError, parse_tag_arguments

bp = page_blueprint("catalog", __name__)
ADMINS = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN)


@bp.get("/templates")
def index() -> tuple[str, int]:
    context = _index_context()
    status = 400 if context["search_error"] else 200
    return render_template("catalog/index.html", **context, form={}, errors={}), status


def _index_context() -> dict[str, object]:
    """The list (narrowed by the search box, ``?q=``, and in the order ``?sort=`` names) and the upload form's."""
    user = page_user()
    usage = storage.storage_usage(user, storage.configured_quota()) if user.is_template_admin else None
    search, sort = request.args.get("q", "").strip(), request.args.get("sort", "")
    try:
        page = page_of(listed_templates(user, search, sort), requested_page(), endpoint="catalog.index")
        search_error = ""
    except InvalidInput as error:  # the box keeps what was typed, with what is wrong with it
        page, search_error = Page.empty(), error.message
    # Where the form may create templates: named (a choice) once there is more than the default organisation.
    names = organization_names()
    creatable = {key: names[key] for key in access.creatable_organization_ids(user) if key in names}
    return {
        "page": page, "storage": usage, "search": search, "search_error": search_error, "sort": sort or "name",
        "organizations": creatable if len(names) > 1 else {}, "may_upload": bool(creatable) or user.is_template_admin,
    }  # fmt: skip


@bp.get("/templates/routing-check")
@require_role(*ADMINS)
def routing_check() -> str:
    """htmx, as an admin types the upload form's tags: which daemons would take its import and builds."""
    try:
        tags = parse_tag_arguments(request.args.get("tags", "").split())
        serving = overview.daemons_serving(tags, page_user().id)
    except (TagError, DomainError) as exc:
        return render_template("catalog/_partials/routing.html", error=str(exc), online=0, offline=0, tags={})
    online = sum(1 for view in serving if view.status != "offline")
    return render_template(
        "catalog/_partials/routing.html", error="", online=online, offline=len(serving) - online, tags=tags
    )


@bp.post("/templates")
def upload() -> Response | tuple[str, int]:
    """One form for a new template or a new version: an archive, or the .tf files themselves (a template's own
    admins may push to it; only owners and template admins make new ones). Once stored, the archive is kept across
    a refused submit (a hidden ``file_id``): a browser cannot put a chosen file back in the form."""
    access.require_author(page_user())
    fields = ("name", "version_name", "message", "tags", "variables", "publish", "file_id", "organization")
    form = {key: request.form.get(key, "") for key in fields}
    request.max_content_length = MAX_ARCHIVE_BYTES + 1024 * 1024
    try:
        name = services.check_template_name(form["name"])
        try:
            tags = parse_tag_arguments(form["tags"].split())
            variables = parse_tag_arguments([line for line in form["variables"].splitlines() if line.strip()])
        except TagError as exc:
            raise InvalidInput(str(exc)) from exc
        uploads = [item for item in request.files.getlist("files") if item.filename]
        if uploads or not form["file_id"]:
            archive = _uploaded_archive(uploads)
            form["file_id"] = storage.store_archive(page_user(), archive, storage.configured_quota()).id
        organization_id = get_organization(form["organization"]).id if form["organization"] else None
        existing = [
            found
            for found in services.list_templates(page_user(), name)
            if organization_id is None or found.organization_id == organization_id
        ]
        template = existing[0] if existing else None
        version_name = _checked_version_name(template, form)
        failed = services.failed_version_named(template, version_name) if template and version_name else None
        version = services.create_version(
            page_user(),
            form["file_id"],
            template_id=template.id if template else None,
            name=version_name,
            provisioner_tags=tags,
            user_variable_values=[NameValue(name=key, value=value) for key, value in variables.items()],
            publish_as=name if form["publish"] == "on" else "",
            message=form["message"],
            organization_id=organization_id,
        )
    except DomainError as error:
        errors = {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}
        return render_template("catalog/index.html", **_index_context(), form=form, errors=errors), error.status
    if failed is not None:  # renamed by create_version, so that this push has the name it was meant to have
        flash(f"The failed import that was named {version_name} is now {failed.name}; its log is kept.", "info")
    return redirect(url_for("catalog.version", version_id=version.id, template_name=name))


def _checked_version_name(template: Template | None, form: dict[str, str]) -> str:
    """The form's version name, checked; its problem marks the form's own field, which then suggests the next free
    name (the chosen file is kept by the caller)."""
    given = form["version_name"].strip()
    try:
        return services.new_version_name(template, given) if given else ""
    except DomainError as error:
        detail = error.validations[0]["detail"] if error.validations else error.message
        if template is not None and error.status == Conflict.status:
            form["version_name"] = services.suggested_version_name(template, given)
            detail = f"{template.name} already has a version named {given!r}: {form['version_name']!r} is free."
        raise InvalidInput(error.message, validations=[{"field": "version_name", "detail": detail}]) from error


def _uploaded_archive(files: list[FileStorage]) -> bytes:
    files = [item for item in files if item.filename]
    if not files:
        raise InvalidInput("Choose a .tar or .zip archive, or the template's .tf files.")
    if len(files) == 1 and not (files[0].filename or "").endswith((".tf", ".tf.json", ".md", ".hcl")):
        data: bytes = files[0].read()
        return data
    return tar_of_uploads({item.filename or "": item.read() for item in files})


@bp.get("/templates/<name>")
def show(name: str) -> str:
    template = services.get_template_by_name_for(page_user(), name)
    active = services.get_version(template.active_version_id) if template.active_version_id else None
    versions = page_of(services.versions_query(template), requested_page())
    return render_template(
        "catalog/show.html",
        template=template,
        versions=versions,
        versions_seen=seen_token({"refresh": _versions_state(template, versions)}),
        active=active,
        failed_versions=services.failed_versions_count(template),
        variables=services.public_variables(active) if active else [],
        resources=job_resources(active.job_id, "start") if active else [],
        readme=render_markdown(active.readme) if active and active.readme else None,
        external_auth=external_auth.needs_status(page_user(), active.external_auth) if active else [],
        access_list=acl.template_acl(template),
        may_admin=access.may(page_user(), template, "admin"),
        sections=template_sections(template, page_user()),
    )


@bp.get("/templates/<name>/versions/events")
def versions_events(name: str) -> Response:
    """`refresh` when the template page's page of versions (?page=) changes. Checked on job notices (a version
    pushed, an import ending); a publish or an archive by someone else shows with the next one."""
    template_id, number = services.get_template_by_name_for(page_user(), name).id, requested_page()

    def live_state() -> object:
        template = db.session.get(Template, template_id)
        if template is None:  # deleted while watched: a last refresh shows the page's own answer
            return None
        return _versions_state(template, page_of(services.versions_query(template), number))

    return event_stream(follow_statuses(get_relay(), live_state, seen=request.args.get("seen")))


def _versions_state(template: Template, versions: Page) -> tuple[str | None, list[tuple[str, str, bool]], int]:
    """What the versions' stream compares: the active version, each version's import status and whether it is
    archived, and how many there are."""
    rows = [(version.id, version.job.status, version.archived_at is not None) for version in versions.rows]
    return template.active_version_id, rows, versions.total


@bp.get("/templates/versions/<version_id>")
def version(version_id: str) -> str:
    found = services.get_version_for(page_user(), version_id, "admin")
    return render_template(
        "catalog/version.html",
        version=found,
        **log_page_context(found.job),
        retry_url=url_for("catalog.retry", version_id=found.id),
        template_name=request.args.get("template_name", ""),
        template=services.get_template(found.template_id) if found.template_id else None,
        sections=job_sections(found.job, f"the import of {found.name}"),
    )


@bp.get("/templates/versions/<version_id>/log/stream")
def version_log_stream(version_id: str) -> Response:
    template_name, csrf = request.args.get("template_name", ""), generate_csrf()
    watched = services.get_version_for(page_user(), version_id, "admin")

    def follow_up(job: ProvisionerJob) -> str:
        """As the import ends: published by its upload, or the Publish form (no reload, no extra step)."""
        found = services.get_version(version_id)
        db.session.refresh(found)
        template = services.get_template(found.template_id) if found.template_id else None
        return render_template(
            "catalog/_partials/publish.html", version=found, template=template, template_name=template_name, csrf=csrf
        )

    return page_stream(
        watched.job,
        lambda job: job.status,
        job_status=True,
        follow_up=follow_up,
        retry_url=url_for("catalog.retry", version_id=version_id),
    )


@bp.post("/templates/versions/<version_id>/retry")
def retry(version_id: str) -> Response:
    """Import a failed version's files again as a new version; ``debug=1`` runs its Terraform with TF_LOG=debug."""
    found = services.get_version_for(page_user(), version_id, "admin")

    def retry_import(debug_logging: bool) -> str:
        retried = services.retry_import(page_user(), found, debug_logging=debug_logging)
        return url_for("catalog.version", version_id=retried.id)

    return retry_from_form(retry_import, url_for("catalog.version", version_id=found.id), "import")


@bp.post("/templates/versions/<version_id>/archive")
def archive(version_id: str) -> Response:
    """Archive a version from its template's page: it builds no new workspace and stops counting for storage."""
    found = services.get_version_for(page_user(), version_id, "admin")
    template = services.get_template(found.template_id) if found.template_id else None
    try:
        storage.archive_version(found)
        flash(f"Version {found.name} is archived; its archive no longer counts against your storage.", "success")
    except DomainError as error:
        flash(error.message, "error")
    if template is None:
        return redirect(url_for("catalog.index"))
    return redirect(url_for("catalog.show", name=template.name))


@bp.post("/templates/versions/<version_id>/unarchive")
def unarchive(version_id: str) -> Response:
    found = services.get_version_for(page_user(), version_id, "admin")
    try:
        admin.unarchive_version(found)
        flash(f"Version {found.name} is no longer archived.", "success")
    except DomainError as error:
        flash(error.message, "error")
    if found.template_id is None:
        return redirect(url_for("catalog.index"))
    return redirect(url_for("catalog.show", name=services.get_template(found.template_id).name))


@bp.post("/templates/<name>/versions/archive")
def archive_failed(name: str) -> Response:
    """The Versions card's bulk action: archive every failed (or canceled) version at once."""
    template = services.get_template_by_name_for(page_user(), name, "admin")
    archived = admin.archive_unused_versions(template, everything_unused=False)
    if archived:
        names = ", ".join(version.name for version in archived)
        flash(f"Archived {len(archived)} failed version{'' if len(archived) == 1 else 's'}: {names}.", "success")
    else:
        flash("No failed version to archive.", "info")
    return redirect(url_for("catalog.show", name=template.name))


@bp.post("/templates/versions/<version_id>/publish")
def publish(version_id: str) -> Response | tuple[str, int]:
    """Make a successfully imported version a new template (owners and template admins), or the active version of
    its template (its admins too)."""
    found = services.get_version_for(page_user(), version_id, "admin")
    if not found.template_id and not access.may_create_in(page_user(), found.job.organization_id):
        raise Forbidden("Only owners and template admins create templates.")
    try:
        if found.template_id:
            template = services.promote_version(services.get_template(found.template_id), found.id)
            flash(f"{found.name} is now the active version of {template.name}.", "success")
        else:
            template = services.create_template(page_user(), request.form.get("name", ""), found.id)
            flash(f"Template {template.name} created.", "success")
    except DomainError as error:
        flash(error.message, "error")
        return redirect(url_for("catalog.version", version_id=found.id, template_name=request.form.get("name", "")))
    return redirect(url_for("catalog.show", name=template.name))


@bp.route("/templates/<name>/delete", methods=["GET", "POST"])
def delete(name: str) -> Response | str | tuple[str, int]:
    """Deleting asks for the template's name first, and says which workspaces still use it when any does."""
    template = services.get_template_by_name_for(page_user(), name, "admin")
    if request.method == "POST":
        try:
            if request.form.get("name", "").strip() != template.name:
                raise InvalidInput(f"Type {template.name} to confirm.")
            admin.delete_template(template)
        except DomainError as error:
            page = render_template("catalog/delete.html", template=template, in_use=[], error=error.message)
            return page, error.status
        flash(f"Template {name} deleted.", "success")
        return redirect(url_for("catalog.index"))
    in_use = admin.workspaces_on(template)
    return render_template("catalog/delete.html", template=template, in_use=in_use, error="")


def _version_of(template: Template, name: str | None, default: TemplateVersion | None) -> TemplateVersion | None:
    return services.get_version_by_name(template, name) if name else default


@bp.get("/templates/<name>/source")
def source(name: str) -> str:
    """The Source tab: a version's files (the active one unless ``?version=``) and one of them highlighted."""
    template = services.get_template_by_name_for(page_user(), name, "admin")
    versions = services.list_versions(template)
    active = next((item for item in versions if item.id == template.active_version_id), None)
    version = _version_of(template, request.args.get("version"), active or (versions[0] if versions else None))
    if version is None:
        raise NotFound(f"Template {name} has no version.")
    files, error = {}, ""
    try:
        files = catalog_source.version_source(version.job.file_id)
    except DomainError as problem:
        error = problem.message
    wanted = request.args.get("file") or ("main.tf" if "main.tf" in files else next(iter(files), ""))
    shown = files.get(wanted)
    code = catalog_source.highlighted(shown) if shown and shown.text is not None else None
    return render_template(
        "catalog/source.html", template=template, versions=versions, version=version, files=files, shown=shown,
        code=code, error=error, missing=wanted if wanted and shown is None else "",
    )  # fmt: skip


@bp.get("/templates/<name>/diff")
def diff(name: str) -> str:
    """Compare versions: by default the active (or newest) version against the newest other one (newer or older:
    a just-pushed version not yet published is what an admin wants to compare with the active one)."""
    template = services.get_template_by_name_for(page_user(), name, "admin")
    versions = services.list_versions(template)
    old, new = catalog_source.compared_versions(
        versions,
        template.active_version_id,
        _version_of(template, request.args.get("from"), None),
        _version_of(template, request.args.get("to"), None),
    )
    diffs, error = [], ""
    if old is not None and new is not None:
        try:
            before = catalog_source.version_source(old.job.file_id)
            after = catalog_source.version_source(new.job.file_id)
            diffs = catalog_source.diff_versions(before, after, old.name, new.name)
        except DomainError as problem:
            error = problem.message
    return render_template(
        "catalog/diff.html", template=template, versions=versions, old=old, new=new, diffs=diffs, error=error
    )
