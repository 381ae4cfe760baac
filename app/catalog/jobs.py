"""Template imports as provisioner jobs: what the daemon gets, and what its result stores on the version."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from flask import current_app, url_for
from sqlalchemy import select

from app.catalog.models import Template, TemplateVersion
from app.catalog.services import publish_imported
from app.core.errors import InvalidInput, NotFound
from app.core.extensions import db
from app.files.services import archive_bytes
from app.provisioning.jobs import JobHandlers, JobSubject
from app.provisioning.models import ProvisionerJob, ProvisionerJobLog
from app.resources.services import store_resources
from protocol.healthchecks import BadExpectation, status_rule
from protocol.logs import STAGE_CLEANUP
from protocol.parameters import ParameterError, RichParameter, check_declaration, check_value
from protocol.provisionerd import AcquiredJob, ImportJob, JobCompletion, Preset
from protocol.resources import App, Resource

MAX_README_CHARS = 256 * 1024


def version_for_job(job: ProvisionerJob) -> TemplateVersion:
    version: TemplateVersion | None = db.session.scalar(select(TemplateVersion).where(TemplateVersion.job_id == job.id))
    if version is None:
        raise NotFound("The job's template version is gone.")
    return version


def import_payload(job: ProvisionerJob, base: AcquiredJob) -> AcquiredJob:
    version = version_for_job(job)
    body = ImportJob(
        template_version_id=version.id,
        archive=archive_bytes(job.file_id),
        user_variable_values=version.user_variable_values,
        debug_logging=job.debug_logging,
    )
    return replace(base, template_import=body)


def import_complete(job: ProvisionerJob, completion: JobCompletion) -> None:
    result = completion.template_import
    if result is None:
        raise InvalidInput("An import's completion must carry its template_import result.")
    for parameter in result.parameters:
        try:
            check_declaration(parameter)
        except ParameterError as exc:  # the provider refused it already; a daemon of an older release may not have
            raise InvalidInput(f"Parameter {parameter.name!r}: {exc}") from None
    check_presets(result.presets, result.parameters)
    check_healthchecks(result.resources.start)
    version = version_for_job(job)
    version.readme = result.readme[:MAX_README_CHARS]
    # A sensitive variable's default is a secret the server never needs (the daemon reads it from the template).
    version.variables = tuple(
        replace(variable, default_value="") if variable.sensitive else variable for variable in result.variables
    )
    version.parameters = result.parameters
    version.external_auth = result.external_auth
    version.secrets = result.secrets
    version.workspace_tags = dict(result.workspace_tags)
    version.presets = result.presets
    store_resources(job.id, "start", result.resources.start)
    store_resources(job.id, "stop", result.resources.stop)
    warn_of_unavailable_apps(job, result.resources.start)
    publish_imported(version)


def warn_of_unavailable_apps(job: ProvisionerJob, resources: Sequence[Resource]) -> None:
    """A warning at the end of the import's log for each subdomain app this deployment cannot serve: it would
    show as unavailable, never be served on a path (the page and the API say so too)."""
    if current_app.config["SLIPWAY_SETTINGS"].wildcard_access_url:
        return
    for app in subdomain_apps(resources):
        warning = f"Warning: app {app.slug!r} has subdomain = true and this server has no wildcard access URL "
        warning += "(--wildcard-access-url): workspaces will show it as unavailable."
        db.session.add(
            ProvisionerJobLog(
                job_id=job.id, source="provisioner_daemon", level="warn", stage=STAGE_CLEANUP, output=warning
            )
        )


def subdomain_apps(resources: Sequence[Resource]) -> list[App]:
    return [app for resource in resources for agent in resource.agents for app in agent.apps if app.subdomain]


def check_healthchecks(resources: Sequence[Resource]) -> None:
    """A healthcheck whose ``#expect=`` the agent cannot read would fail for ever: refused at import instead."""
    for app in (app for resource in resources for agent in resource.agents for app in agent.apps):
        if app.healthcheck is not None:
            try:
                status_rule(app.healthcheck.url)
            except BadExpectation as exc:
                raise InvalidInput(f"App {app.slug!r}: {exc}.") from None


def check_presets(presets: Sequence[Preset], parameters: Sequence[RichParameter]) -> None:
    """Coder's rules for a version's presets: unique names, at most one default, and values only for parameters
    the version declares (a preset naming another would set nothing, silently) that those parameters accept."""
    declared = {parameter.name: parameter for parameter in parameters}
    seen: set[str] = set()
    for preset in presets:
        if preset.name in seen:
            raise InvalidInput(f"coder_workspace_preset names must be unique, but {preset.name!r} appears twice.")
        seen.add(preset.name)
        for item in preset.parameters:
            if item.name not in declared:
                raise InvalidInput(
                    f"Preset {preset.name!r} sets parameter {item.name!r}, which the template does not declare"
                    ' (no data "coder_parameter" has that name).'
                )
            try:  # a value the parameter refuses would fail every workspace made with the preset
                check_value(declared[item.name], item.value, None)
            except ParameterError as exc:
                raise InvalidInput(
                    f"Preset {preset.name!r} sets parameter {item.name!r} to {item.value!r}: {exc}"
                ) from None
    defaults = [preset.name for preset in presets if preset.default]
    if len(defaults) > 1:
        raise InvalidInput(
            f"At most one coder_workspace_preset can be the default, but {len(defaults)} are: {', '.join(defaults)}."
        )


def import_secrets(job: ProvisionerJob) -> list[str]:
    # Which variables are sensitive is only known once the import has read them: treat every given value so.
    return [item.value for item in version_for_job(job).user_variable_values]


def import_subjects(jobs: Sequence[ProvisionerJob]) -> dict[str, JobSubject]:
    rows = db.session.execute(
        select(TemplateVersion, Template.name)
        .outerjoin(Template, Template.id == TemplateVersion.template_id)
        .where(TemplateVersion.job_id.in_([job.id for job in jobs]))
    ).all()
    subjects = {}
    for version, template_name in rows:
        subjects[version.job_id] = JobSubject(
            title=f"Import {template_name or 'new template'} {version.name}",
            url=url_for("catalog.version", version_id=version.id, template_name=template_name or ""),
            template_name=template_name or "",
        )
    return subjects


IMPORT_HANDLERS = JobHandlers(
    payload=import_payload,
    complete=import_complete,
    result="template_import",
    secrets=import_secrets,
    describe=import_subjects,
)
