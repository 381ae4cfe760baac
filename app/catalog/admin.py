"""Keeping a template tidy: deleting it once no workspace uses it, and archiving and unarchiving its versions
(one at a time, or every failed or unused one at once, as ``coder templates archive`` does)."""

from __future__ import annotations

from sqlalchemy import exists, select, update

from app.catalog.models import Template, TemplateVersion
from app.catalog.storage import configured_quota, kept_by, over_quota_message, storage_usage, versions_in_use
from app.core.columns import utcnow
from app.core.errors import Conflict, TooLarge
from app.core.extensions import db
from app.files.models import File
from app.provisioning.models import CANCELED, FAILED, ProvisionerJob
from app.users.models import User

# Named in an error, at most this many workspaces (then "…").
NAMES_SHOWN = 5


def workspaces_on(template: Template) -> list[str]:
    """ "owner/name" of (up to one more than :data:`NAMES_SHOWN`) workspaces on a version of ``template``."""
    in_use = versions_in_use().subquery()
    return list(
        db.session.scalars(
            select(in_use.c.workspace)
            .join(TemplateVersion, TemplateVersion.id == in_use.c.template_version_id)
            .where(TemplateVersion.template_id == template.id)
            .order_by(in_use.c.workspace)
            .limit(NAMES_SHOWN + 1)
        )
    )


def delete_template(template: Template) -> None:
    """Delete a template no workspace uses (409 naming them otherwise). Its row stays, under a name nobody can
    type (so the name is free again), for the history of deleted workspaces; its versions are archived, so their
    archives stop counting against anyone's storage and are freed by the maintenance loop."""
    workspaces = workspaces_on(template)
    if workspaces:
        names = ", ".join(workspaces[:NAMES_SHOWN]) + (", …" if len(workspaces) > NAMES_SHOWN else "")
        raise Conflict(
            f"Template {template.name} is used by workspaces ({names}): delete them first, or deprecate the "
            "template so no new ones are made."
        )
    now = utcnow()
    db.session.execute(
        update(TemplateVersion)
        .where(TemplateVersion.template_id == template.id, TemplateVersion.archived_at.is_(None))
        .values(archived_at=now)
        .execution_options(synchronize_session=False)
    )
    template.display_name = template.display_name or template.name
    template.name = "~" + template.id.replace("-", "")[:31]  # "~" is never part of a template name
    template.deleted_at = now
    db.session.commit()


def unarchive_version(version: TemplateVersion) -> TemplateVersion:
    """Make an archived version usable again; refused (409) when its archive was freed meanwhile (push it again),
    or when it would take its creator over their template storage quota."""
    if version.archived_at is None:
        return version
    stored = db.session.get(File, version.job.file_id) if version.job.file_id else None
    if stored is None or stored.freed:
        raise Conflict(f"{version.name}'s archive was freed when nothing needed it: push the template again.")
    creator = db.session.get(User, version.created_by)
    quota = configured_quota()
    if quota and creator is not None:
        kept = db.session.scalar(select(File.id).where(File.id == stored.id, kept_by(creator.id, utcnow())))
        usage = storage_usage(creator, quota)
        if not kept and usage.used_bytes + stored.size > quota:
            raise TooLarge(over_quota_message(usage, stored.size))
    version.archived_at = None
    db.session.commit()
    return version


def archive_unused_versions(template: Template, *, everything_unused: bool) -> list[TemplateVersion]:
    """``coder templates archive``: archive the template's failed (and canceled) versions, or with
    ``everything_unused`` every version that is neither active, importing, nor what a workspace is on. Returns
    the versions archived."""
    in_use = select(versions_in_use().subquery().c.template_version_id)
    query = (
        select(TemplateVersion)
        .join(ProvisionerJob, ProvisionerJob.id == TemplateVersion.job_id)
        .where(
            TemplateVersion.template_id == template.id,
            TemplateVersion.archived_at.is_(None),
            ProvisionerJob.completed_at.is_not(None),
            TemplateVersion.id.not_in(in_use),
        )
        .order_by(TemplateVersion.created_at, TemplateVersion.id)
    )
    if template.active_version_id:
        query = query.where(TemplateVersion.id != template.active_version_id)
    if not everything_unused:
        query = query.where(ProvisionerJob.status.in_((FAILED, CANCELED)))
    versions = list(db.session.scalars(query))
    if versions:
        now = utcnow()
        db.session.execute(
            update(TemplateVersion)
            .where(
                TemplateVersion.id.in_([version.id for version in versions]),
                TemplateVersion.archived_at.is_(None),
                ~exists().where(Template.active_version_id == TemplateVersion.id),  # promoted meanwhile
            )
            .values(archived_at=now)
            .execution_options(synchronize_session=False)
        )
        db.session.commit()
        for version in versions:
            db.session.refresh(version)
    return [version for version in versions if version.archived_at is not None]
