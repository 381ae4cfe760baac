"""Templates and their versions. Creating a version queues an import job that plans it without applying."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from flask import current_app
from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload

from app.catalog import access
from app.catalog.access import TemplateNeed
from app.catalog.models import Template, TemplateAcl, TemplateVersion
from app.catalog.terraform_requirements import required_terraform
from app.catalog.version_names import MAX_VERSION_NAME, readable_name, version_name_problem
from app.core.config import Settings
from app.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.core.extensions import db
from app.core.validation import USERNAME_PATTERN
from app.files.services import archive_bytes, usable_file
from app.groups.models import ACL_USE
from app.organizations.models import DEFAULT_ORGANIZATION_ID, Organization
from app.organizations.services import is_member
from app.provisioning.jobs import dispatch, new_job
from app.provisioning.models import CANCELED, DEBUG_LOGGING, FAILED, SUCCEEDED, ProvisionerJob
from app.users.models import User
from protocol.codec import JsonObject
from protocol.provisionerd import JOB_TEMPLATE_IMPORT, NameValue
from protocol.tags import TagError, normalise_tags

# A version's message: a line or a paragraph, as the versions list shows it (the API's limit for a text field).
MAX_VERSION_MESSAGE = 4096


def check_template_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= 32 or not USERNAME_PATTERN.match(name):
        raise InvalidInput(
            "Invalid template name.",
            validations=[{"field": "name", "detail": "Use 1-32 letters, digits and single hyphens."}],
        )
    return name


def create_version(
    actor: User,
    file_id: str,
    *,
    template_id: str | None = None,
    name: str = "",
    provisioner_tags: dict[str, str] | None = None,
    user_variable_values: Sequence[NameValue] = (),
    publish_as: str = "",
    debug_logging: bool = False,
    message: str = "",
    organization_id: str | None = None,
) -> TemplateVersion:
    """``publish_as``: a template name the version is published as once its import succeeds (see
    :func:`publish_imported`); empty, it waits for someone to publish it. ``debug_logging``: its import runs
    Terraform with TF_LOG=debug. ``message``: what changed, in the pusher's words. A failed (or canceled) version
    holding ``name`` is renamed to free it. ``organization_id``: where the version is imported (a template's versions
    are its organisation's); None: the template's, or the default organisation for a version of no template yet."""
    stored = usable_file(file_id)
    template = get_template_for(actor, template_id, "admin") if template_id is not None else None
    if template is None:
        organization_id = organization_id or DEFAULT_ORGANIZATION_ID
        _require_may_publish(actor, publish_as, organization_id)
    elif organization_id is None:
        organization_id = template.organization_id
    elif organization_id != template.organization_id:
        raise NotFound("No such template in this organisation.")
    name = new_version_name(template, name.strip())
    if len(message.strip()) > MAX_VERSION_MESSAGE:
        detail = f"At most {MAX_VERSION_MESSAGE} characters."
        raise InvalidInput("The version's message is too long.", validations=[{"field": "message", "detail": detail}])
    try:
        tags = normalise_tags(provisioner_tags or {}, actor.id)
    except TagError as exc:
        raise InvalidInput(str(exc)) from exc
    required = required_terraform(archive_bytes(stored.id))
    job = new_job(
        JOB_TEMPLATE_IMPORT, organization_id=organization_id, file_id=stored.id, initiator_id=actor.id, tags=tags,
        job_input={}, required_terraform=required,
    )  # fmt: skip
    version = TemplateVersion(
        template_id=template_id,
        name=name,
        job=job,
        created_by=actor.id,
        message=message.strip(),
        user_variable_values=tuple(user_variable_values),
        publish_as=check_template_name(publish_as) if publish_as else "",
    )
    try:
        if template is not None:
            free_failed_name(template, name)
        db.session.add(version)
        db.session.flush()
    except IntegrityError as exc:  # the same name pushed (or a failed one renamed) twice at once
        db.session.rollback()
        raise Conflict(f"A version named {name!r} was just added to this template: choose another name.") from exc
    job.input = {"template_version_id": version.id, **({DEBUG_LOGGING: True} if debug_logging else {})}
    db.session.commit()
    dispatch(job)
    return version


def _require_may_publish(actor: User, publish_as: str, organization_id: str) -> None:
    """A version of no template yet: only owners and template admins make new templates (template admins in
    organisations they belong to, and that organisation's own template admins), while a template's own admins may
    publish to it by name."""
    if access.may_create_in(actor, organization_id):
        return
    if not is_member(organization_id, actor.id):
        raise NotFound("No such organisation.")
    existing = db.session.scalar(
        select(Template).where(
            func.lower(Template.name) == publish_as.lower(),
            Template.organization_id == organization_id,
            Template.deleted_at.is_(None),
        )
    )
    if not publish_as or existing is None:
        raise Forbidden("Only owners and template admins create templates: push a version to a template you manage.")
    access.require(actor, existing, "admin")


def retry_import(actor: User, failed: TemplateVersion, *, debug_logging: bool = False) -> TemplateVersion:
    """Import a failed version's files again, as a new version of the same template with the same tags and
    variables (published as its upload asked); ``debug_logging`` runs its Terraform with TF_LOG=debug."""
    if failed.job.status != FAILED:
        raise InvalidInput(f"Only a failed import can be retried; this one is {failed.job.status}.")
    return create_version(
        actor,
        failed.job.file_id,
        template_id=failed.template_id,
        provisioner_tags=failed.job.tags,
        user_variable_values=failed.user_variable_values,
        publish_as=failed.publish_as,
        debug_logging=debug_logging,
        message=failed.message,
        organization_id=failed.job.organization_id,
    )


def _version_names(template_id: str) -> set[str]:
    return set(db.session.scalars(select(TemplateVersion.name).where(TemplateVersion.template_id == template_id)))


def failed_version_named(template: Template, name: str) -> TemplateVersion | None:
    """The template's version of this name when its import failed or was canceled: its name is free to push again."""
    return db.session.scalar(
        select(TemplateVersion)
        .join(ProvisionerJob, ProvisionerJob.id == TemplateVersion.job_id)
        .where(TemplateVersion.template_id == template.id, TemplateVersion.name == name)
        .where(ProvisionerJob.status_in([FAILED, CANCELED]))
    )


def new_version_name(template: Template | None, given: str) -> str:
    """The pushed name, checked and not yet taken in the template (a failed or canceled import does not hold its
    name: :func:`free_failed_name` renames it); or a readable one, ``<adjective>-<noun>-<n>``."""
    taken = _version_names(template.id) if template is not None else set()
    if not given:
        return readable_name(len(taken) + 1, taken)
    problem = version_name_problem(given)
    if problem:
        raise InvalidInput("Invalid version name.", validations=[{"field": "name", "detail": problem}])
    if template is not None and given in taken and failed_version_named(template, given) is None:
        suggestion = next_free_name(given, taken)
        raise Conflict(
            f"Template {template.name} already has a version named {given!r}: choose another name "
            f"(such as {suggestion!r}).",
            validations=[{"field": "name", "detail": f"Taken; {suggestion!r} is free."}],
        )
    return given


def next_free_name(name: str, taken: set[str], suffix: str = "") -> str:
    """``name`` with ``suffix`` (when given) and then a number (``-2``, ``-3``…) until it is not in ``taken``,
    within the length a version name may have."""
    tails = ([suffix] if suffix else []) + [f"{suffix}-{number}" for number in range(2, len(taken) + 3)]
    for tail in tails:
        candidate = name[: MAX_VERSION_NAME - len(tail)].rstrip("._-") + tail
        if candidate not in taken:
            return candidate
    return f"{name[: MAX_VERSION_NAME - 7]}-{secrets.token_hex(3)}"  # not reached: there are more tails than names


def suggested_version_name(template: Template, given: str) -> str:
    """The next free name after a taken one: ``release-1.2`` -> ``release-1.2-2``."""
    return next_free_name(given, _version_names(template.id))


def free_failed_name(template: Template, name: str) -> TemplateVersion | None:
    """Rename the failed (or canceled) version holding ``name`` to ``<name>-failed`` (then ``-failed-2``…), so a
    fixed push can take the name it was meant to have; its log and files stay. The caller commits."""
    failed = failed_version_named(template, name)
    if failed is not None:
        failed.name = next_free_name(name, _version_names(template.id), suffix="-failed")
        db.session.flush()
    return failed


def get_version(version_id: str) -> TemplateVersion:
    version = db.session.get(TemplateVersion, version_id)
    if version is None:
        raise NotFound("No such template version.")
    return version


def get_version_for(user: User, version_id: str, need: TemplateNeed = "use") -> TemplateVersion:
    """The version if ``user`` may ``need`` its template. A version of no template yet (an upload waiting to be
    published) is its uploader's and the site template admins' alone."""
    version = get_version(version_id)
    template = db.session.get(Template, version.template_id) if version.template_id else None
    if template is not None:
        # A deleted template's versions stay readable to its admins (their history), through the same rule.
        access.require(user, template, need)
    elif not (
        user.is_template_admin
        or version.created_by == user.id
        or access.manages_templates_of(user, version.job.organization_id)
    ):
        raise NotFound("No such template version.")
    return version


def create_template(
    actor: User, name: str, version_id: str, display_name: str = "", description: str = "", organization_id: str = ""
) -> Template:
    """``organization_id`` (Coder's ``POST /organizations/{org}/templates``): the organisation the caller means, which
    must be the one its version was imported in."""
    name = check_template_name(name)
    version = get_version(version_id)
    if organization_id and version.job.organization_id != organization_id:
        raise InvalidInput("That version was imported in another organisation: push it to this one.")
    if version.archived_at is not None:
        raise InvalidInput(f"Template version {version.name} is archived: push the template again.")
    if version.job.status != SUCCEEDED:
        raise InvalidInput(f"The version's import has not succeeded (it is {version.job.status}).")
    if version.template_id is not None:
        raise Conflict("That version already belongs to a template.")
    # The template is the organisation's whose daemons imported its first version; names are unique within it.
    organization_id = version.job.organization_id
    if not (actor.is_template_admin or access.manages_templates_of(actor, organization_id)):
        raise Forbidden("Only owners, template admins and the organisation's template admins create templates there.")
    named = func.lower(Template.name) == name.lower()
    if db.session.scalar(select(Template.id).where(named, Template.organization_id == organization_id)):
        raise Conflict(f"A template named {name!r} already exists.")
    template = Template(
        name=name, display_name=display_name.strip()[:64], description=description[:4096], created_by=actor.id,
        organization_id=organization_id,
    )  # fmt: skip
    db.session.add(template)
    try:
        db.session.flush()
        open_to_everyone(template)
        version.template_id = template.id
        template.active_version_id = version.id
        db.session.commit()
    except IntegrityError as exc:
        db.session.rollback()
        raise Conflict(f"A template named {name!r} already exists.") from exc
    return template


def publish_imported(version: TemplateVersion) -> Template | None:
    """Called as a version's import succeeds, in its completion's transaction: a version uploaded to publish
    becomes the active version of its template, which is created now when it is new (or was deleted meanwhile).
    Returns the template, or None when the version waits for someone to publish it."""
    if not version.publish_as or version.archived_at is not None:
        return None
    template = db.session.get(Template, version.template_id) if version.template_id else None
    # A version of no template yet is published in the organisation it was imported in.
    organization_id = version.job.organization_id
    if template is None or template.deleted_at is not None:
        template = db.session.scalar(
            select(Template).where(
                func.lower(Template.name) == version.publish_as.lower(), Template.organization_id == organization_id
            )
        )
    if template is None:
        template = Template(name=version.publish_as, created_by=version.created_by, organization_id=organization_id)
        try:
            with db.session.begin_nested():  # created by someone else just now: leave it to a person
                db.session.add(template)
        except IntegrityError:
            return None
        open_to_everyone(template)
    if version.template_id != template.id and version.name in _version_names(
        template.id
    ):  # a template of that name was made meanwhile, with a version of the same name
        taken = _version_names(template.id)
        version.name = readable_name(len(taken) + 1, taken)
    version.template_id = template.id
    template.active_version_id = version.id
    return template


def open_to_everyone(template: Template) -> None:
    """A new template's access list: Everyone in its organisation may use it, unless the deployment says new
    templates start closed (SLIPWAY_NEW_TEMPLATES_FOR_EVERYONE=false). The caller commits."""
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    if settings.new_templates_for_everyone:
        # The Everyone group's id is its organisation's.
        db.session.add(TemplateAcl(template_id=template.id, group_id=template.organization_id, role=ACL_USE))


def templates_query(viewer: User, name: str | None = None) -> Select[Template]:
    """The templates ``viewer`` may use, by name (then id, so that pages never overlap), or the one named ``name``."""
    query = (
        select(Template)
        .where(Template.deleted_at.is_(None), access.template_filter(viewer, "use"))
        .order_by(Template.name, Template.id)
    )
    if name:
        query = query.where(Template.name == name)
    return query


def list_templates(viewer: User, name: str | None = None) -> list[Template]:
    return list(db.session.scalars(templates_query(viewer, name)))


def get_template(template_id: str) -> Template:
    """The template, whoever asks: for the server's own work (an import's completion, the lifecycle executor).
    Anything a person asks for goes through :func:`get_template_for`."""
    template = db.session.get(Template, template_id)
    if template is None or template.deleted_at is not None:
        raise NotFound("No such template.")
    return template


def get_template_for(user: User, template_id: str, need: TemplateNeed = "use") -> Template:
    """The template if ``user`` may ``need`` it; 404 when they may not use it (it does not exist for them), 403 when
    they may use it but ``need`` admin."""
    return access.require(user, get_template(template_id), need)


def get_template_by_name_for(
    user: User, name: str, need: TemplateNeed = "use", organization: Organization | None = None
) -> Template:
    """The template called ``name`` in ``organization``. Names are unique within an organisation only: without one,
    the default organisation's comes first, then the others' (by id), and the first ``user`` may use is the one."""
    query = select(Template).where(Template.name == name, Template.deleted_at.is_(None))
    if organization is not None:
        query = query.where(Template.organization_id == organization.id)
    query = query.order_by(Template.organization_id != DEFAULT_ORGANIZATION_ID, Template.organization_id)
    for template in db.session.scalars(query):
        if access.template_role(user, template) is not None:
            return access.require(user, template, need)
    where = f" in organisation {organization.name}" if organization is not None else ""
    raise NotFound(f"No template named {name!r}{where}.")


def get_version_by_name(template: Template, name: str) -> TemplateVersion:
    version: TemplateVersion | None = db.session.scalar(
        select(TemplateVersion).where(TemplateVersion.template_id == template.id, TemplateVersion.name == name)
    )
    if version is None:
        raise NotFound(f"Template {template.name} has no version named {name!r}.")
    return version


def versions_query(template: Template) -> Select[TemplateVersion]:
    """A template's versions newest first (then by id, so that pages never overlap), each with its import job."""
    return (
        select(TemplateVersion)
        .where(TemplateVersion.template_id == template.id)
        .options(joinedload(TemplateVersion.job), joinedload(TemplateVersion.author))
        .order_by(TemplateVersion.created_at.desc(), TemplateVersion.id.desc())
    )


def failed_versions_count(template: Template) -> int:
    """How many of the template's versions failed or were canceled and are not archived (the page's bulk archive)."""
    query = (
        select(func.count())
        .select_from(TemplateVersion)
        .join(ProvisionerJob, ProvisionerJob.id == TemplateVersion.job_id)
        .where(TemplateVersion.template_id == template.id, TemplateVersion.archived_at.is_(None))
        .where(ProvisionerJob.status_in([FAILED, CANCELED]))
    )
    return db.session.scalar(query) or 0


def list_versions(template: Template) -> list[TemplateVersion]:
    return list(db.session.scalars(versions_query(template)))


def promote_version(template: Template, version_id: str) -> Template:
    version = get_version(version_id)
    if version.template_id != template.id:
        raise InvalidInput("That version belongs to another template.")
    if version.archived_at is not None:
        raise InvalidInput(f"Template version {version.name} is archived: it cannot be made active.")
    if version.job.status != SUCCEEDED:
        raise InvalidInput(f"Only a version whose import succeeded can be active (this one is {version.job.status}).")
    template.active_version_id = version.id
    db.session.commit()
    return template


def public_variables(version: TemplateVersion) -> list[JsonObject]:
    """Variables as the API shows them: the value of a sensitive one is never returned."""
    return [
        {
            "name": variable.name,
            "description": variable.description,
            "type": variable.type or "string",
            "default_value": "" if variable.sensitive else variable.default_value,
            "required": variable.required,
            "sensitive": variable.sensitive,
        }
        for variable in version.variables
    ]


def sensitive_variable_values(version: TemplateVersion) -> list[str]:
    sensitive = {variable.name for variable in version.variables if variable.sensitive}
    return [item.value for item in version.user_variable_values if item.name in sensitive]
