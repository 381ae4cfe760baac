"""Templates and their versions. Creating a version queues an import job that plans it without applying."""

from __future__ import annotations

import base64
from typing import Any

from flask import url_for
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from app.catalog.models import Template, TemplateVersion
from app.errors import Conflict, InvalidInput, NotFound
from app.extensions import db
from app.files.services import get_file
from app.provisioning.jobs import JobHandlers, JobSubject, dispatch, new_job, register_job_type
from app.provisioning.models import JOB_TEMPLATE_IMPORT, SUCCEEDED, ProvisionerJob
from app.provisioning.resources import store_resources
from app.provisioning.tags import TagError, normalise_tags
from app.users.models import User
from app.validation import USERNAME_PATTERN

MAX_README_CHARS = 256 * 1024


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
    user_variable_values: list[dict[str, str]] | None = None,
) -> TemplateVersion:
    stored = get_file(file_id)
    if template_id is not None:
        get_template(template_id)
    try:
        tags = normalise_tags(provisioner_tags or {}, actor.id)
    except TagError as exc:
        raise InvalidInput(str(exc)) from exc
    values = [{"name": str(v["name"]), "value": str(v.get("value", ""))} for v in user_variable_values or []]
    job = new_job(
        JOB_TEMPLATE_IMPORT,
        file_id=stored.id,
        initiator_id=actor.id,
        tags=tags,
        job_input={"user_variable_values": values},
    )
    version = TemplateVersion(
        template_id=template_id, name=name.strip()[:64], job=job, created_by=actor.id, user_variable_values=values
    )
    db.session.add(version)
    db.session.flush()
    if not version.name:
        version.name = f"v-{version.id[:8]}"
    job.input = {**job.input, "template_version_id": version.id}
    db.session.commit()
    dispatch(job)
    return version


def get_version(version_id: str) -> TemplateVersion:
    version = db.session.get(TemplateVersion, version_id)
    if version is None:
        raise NotFound("No such template version.")
    return version


def create_template(actor: User, name: str, version_id: str, display_name: str = "", description: str = "") -> Template:
    name = check_template_name(name)
    version = get_version(version_id)
    if version.job.status != SUCCEEDED:
        raise InvalidInput(f"The version's import has not succeeded (it is {version.job.status}).")
    if version.template_id is not None:
        raise Conflict("That version already belongs to a template.")
    if db.session.scalar(select(Template.id).where(func.lower(Template.name) == name.lower())):
        raise Conflict(f"A template named {name!r} already exists.")
    template = Template(
        name=name, display_name=display_name.strip()[:64], description=description[:4096], created_by=actor.id
    )
    db.session.add(template)
    try:
        db.session.flush()
        version.template_id = template.id
        template.active_version_id = version.id
        db.session.commit()
    except IntegrityError as exc:
        db.session.rollback()
        raise Conflict(f"A template named {name!r} already exists.") from exc
    return template


def list_templates(name: str | None = None) -> list[Template]:
    query = select(Template).order_by(Template.name)
    if name:
        query = query.where(Template.name == name)
    return list(db.session.scalars(query))


def get_template(template_id: str) -> Template:
    template = db.session.get(Template, template_id)
    if template is None:
        raise NotFound("No such template.")
    return template


def get_template_by_name(name: str) -> Template:
    template: Template | None = db.session.scalar(select(Template).where(Template.name == name))
    if template is None:
        raise NotFound(f"No template named {name!r}.")
    return template


def list_versions(template: Template) -> list[TemplateVersion]:
    query = (
        select(TemplateVersion)
        .where(TemplateVersion.template_id == template.id)
        .order_by(TemplateVersion.created_at.desc())
    )
    return list(db.session.scalars(query))


def promote_version(template: Template, version_id: str) -> Template:
    version = get_version(version_id)
    if version.template_id != template.id:
        raise InvalidInput("That version belongs to another template.")
    if version.job.status != SUCCEEDED:
        raise InvalidInput(f"Only a version whose import succeeded can be active (this one is {version.job.status}).")
    template.active_version_id = version.id
    db.session.commit()
    return template


def public_variables(version: TemplateVersion) -> list[dict[str, Any]]:
    """Variables as the API shows them: the value of a sensitive one is never returned."""
    return [
        {
            "name": var.get("name"),
            "description": var.get("description", ""),
            "type": var.get("type", "string"),
            "default_value": "" if var.get("sensitive") else var.get("default_value", ""),
            "required": bool(var.get("required")),
            "sensitive": bool(var.get("sensitive")),
        }
        for var in version.variables
    ]


def _version_for_job(job: ProvisionerJob) -> TemplateVersion:
    version: TemplateVersion | None = db.session.scalar(select(TemplateVersion).where(TemplateVersion.job_id == job.id))
    if version is None:
        raise NotFound("The job's template version is gone.")
    return version


def _import_payload(job: ProvisionerJob) -> dict[str, Any]:
    version = _version_for_job(job)
    return {
        "template_version_id": version.id,
        "archive": base64.b64encode(get_file(job.file_id).data).decode(),
        "user_variable_values": version.user_variable_values,
    }


def _import_complete(job: ProvisionerJob, body: dict[str, Any]) -> None:
    version = _version_for_job(job)
    resources = body.get("resources") or {}
    if not isinstance(resources, dict):
        raise InvalidInput("resources must map start and stop to lists.")
    version.readme = str(body.get("readme") or "")[:MAX_README_CHARS]
    version.variables = [v for v in body.get("variables") or [] if isinstance(v, dict)]
    version.parameters = [p for p in body.get("parameters") or [] if isinstance(p, dict)]
    stop = resources.get("stop") or []
    store_resources(job.id, "start", resources.get("start") or [], stop_resources=stop)
    store_resources(job.id, "stop", stop)


def _import_secrets(job: ProvisionerJob) -> list[str]:
    # Which variables are sensitive is only known once the import has read them: treat every given value so.
    return [item["value"] for item in _version_for_job(job).user_variable_values]


def sensitive_variable_values(version: TemplateVersion) -> list[str]:
    sensitive = {var.get("name") for var in version.variables if var.get("sensitive")}
    return [item["value"] for item in version.user_variable_values if item["name"] in sensitive]


def _import_subject(job: ProvisionerJob) -> JobSubject:
    version = _version_for_job(job)
    template = db.session.get(Template, version.template_id) if version.template_id else None
    template_name = template.name if template else ""
    return JobSubject(
        title=f"Import {template_name or 'new template'} {version.name}",
        url=url_for("catalog.version", version_id=version.id, template_name=template_name),
        template_name=template_name,
    )


register_job_type(
    JOB_TEMPLATE_IMPORT,
    JobHandlers(payload=_import_payload, complete=_import_complete, secrets=_import_secrets, describe=_import_subject),
)
