"""Template storage: what each person's template archives weigh against ``--template-storage-quota``, archiving
template versions, and freeing archives nothing needs any more (a task of the maintenance loop).

Whose archive is it? Everyone's who keeps it. An archive counts once against each person whose template versions
(not archived) use it, or who uploaded it within :data:`UPLOAD_GRACE` and made no version of it yet. The same
archive uploaded twice by one person costs once; uploaded by two template admins, it counts for both. So nobody
pays for what someone else keeps, and anyone can bring their own usage down: archiving their versions makes their
archives stop counting at once, whoever else still uses them.

An archive is freed (its bytes dropped) when nothing needs it: no job that has not finished, no version that is
not archived, no workspace on a version of it, no upload within the grace period. The maintenance loop also
archives versions nobody can use: imports that failed or were canceled an hour ago, and imports never made part of
a template a day after they ended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import Flask, current_app
from sqlalchemy import ColumnElement, Select, delete, exists, func, select, update

from app.catalog.models import Template, TemplateVersion
from app.core.columns import utcnow
from app.core.config import Settings
from app.core.errors import Conflict, TooLarge
from app.core.extensions import db, rows_changed
from app.files.models import File, FileUpload
from app.files.services import check_archive, find_file, store_file
from app.provisioning.models import CANCELED, FAILED, ProvisionerJob
from app.users.models import User
from protocol.codec import JsonObject
from protocol.values import format_size

# An upload no version uses keeps counting (and is kept) this long: time enough to make a version of it.
UPLOAD_GRACE = timedelta(hours=1)
# A failed or canceled import's version is archived this long after it ended (its log and resources stay).
FAILED_IMPORT_GRACE = timedelta(hours=1)
# A version never made part of a template (the upload page's "publish" step not taken) is archived after this.
UNPUBLISHED_GRACE = timedelta(days=1)
EXTENSION_KEY = "slipway_versions_in_use"

# Columns ``template_version_id`` and ``workspace`` ("owner/name") of every workspace there is, by the version its
# latest build used: the workspaces feature (above this one) provides it.
VersionsInUse = Callable[[], Select[str, str]]


def init_app(app: Flask, versions_in_use: VersionsInUse) -> None:
    app.extensions[EXTENSION_KEY] = versions_in_use


def versions_in_use() -> Select[str, str]:
    provider: VersionsInUse = current_app.extensions[EXTENSION_KEY]
    return provider()


@dataclass(frozen=True)
class StorageUsage:
    used_bytes: int
    archives: int
    # 0: no limit.
    quota_bytes: int

    def to_json(self) -> JsonObject:
        return {"used_bytes": self.used_bytes, "archives": self.archives, "quota_bytes": self.quota_bytes}

    @property
    def summary(self) -> str:
        count = f"{self.archives} archive{'' if self.archives == 1 else 's'}"
        if not self.quota_bytes:
            return f"{format_size(self.used_bytes)} in {count} (no limit)"
        return f"{format_size(self.used_bytes)} of {format_size(self.quota_bytes)} in {count}"


def kept_by(user_id: str, now: datetime) -> ColumnElement[bool]:
    """Whether ``user_id`` keeps the file (a condition on :class:`File`): see the module's docstring."""
    recent_upload = exists().where(
        FileUpload.file_id == File.id, FileUpload.user_id == user_id, FileUpload.uploaded_at > now - UPLOAD_GRACE
    )
    versions = (
        ProvisionerJob.file_id == File.id,
        TemplateVersion.job_id == ProvisionerJob.id,
        TemplateVersion.created_by == user_id,
    )
    live_version = exists().where(*versions, TemplateVersion.archived_at.is_(None))
    # Once the uploader made a version of it, the version decides (archiving it must free the quota at once).
    return File.freed_at.is_(None) & (live_version | (recent_upload & ~exists().where(*versions)))


def configured_quota() -> int:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings.template_storage_quota


def storage_usage(user: User, quota: int) -> StorageUsage:
    used, archives = db.session.execute(
        select(func.coalesce(func.sum(File.size), 0), func.count(File.id)).where(kept_by(user.id, utcnow()))
    ).one()
    return StorageUsage(int(used), int(archives), quota)


def store_archive(uploader: User, data: bytes, quota: int) -> File:
    """Check and store an uploaded archive, refused (413) when it would take the uploader over ``quota`` bytes
    (0: no limit)."""
    archive = check_archive(data)
    if quota:
        existing = find_file(archive.sha256)
        kept = existing is not None and db.session.scalar(
            select(File.id).where(File.id == existing.id, kept_by(uploader.id, utcnow()))
        )
        if not kept:
            usage = storage_usage(uploader, quota)
            if usage.used_bytes + len(data) > quota:
                raise TooLarge(over_quota_message(usage, len(data)))
    return store_file(uploader, archive)


def over_quota_message(usage: StorageUsage, needed: int) -> str:
    hours = int(UPLOAD_GRACE.total_seconds() // 3600)
    return (
        f"Template storage quota exceeded: your template archives take {format_size(usage.used_bytes)} of your "
        f"{format_size(usage.quota_bytes)}, and this one needs {format_size(needed)} more. Archive the template "
        "versions you no longer need (Archive on a template's page, or POST /api/v2/templateversions/<id>/archive): "
        f"their archives stop counting at once. Uploads no version uses stop counting after {hours} hour(s). "
        "An owner can raise the limit (--template-storage-quota)."
    )


def archive_version(version: TemplateVersion) -> TemplateVersion:
    """Archive a version: it builds no new workspace and its archive stops counting against its creator's quota.
    Refused (409) for a version still importing, the active version of its template, or one a workspace is on."""
    if version.archived_at is not None:
        return version
    if version.job.is_active:
        raise Conflict(f"The version's import is still {version.job.status}: wait for it or cancel it first.")
    template = db.session.get(Template, version.template_id) if version.template_id else None
    if template is not None and template.active_version_id == version.id:
        raise Conflict(
            f"{version.name} is the active version of {template.name}: promote another version before archiving it."
        )
    in_use = versions_in_use().subquery()
    workspaces = db.session.scalars(
        select(in_use.c.workspace)
        .where(in_use.c.template_version_id == version.id)
        .order_by(in_use.c.workspace)
        .limit(6)
    ).all()
    if workspaces:
        names = ", ".join(workspaces[:5]) + (", …" if len(workspaces) > 5 else "")
        raise Conflict(
            f"{version.name} is in use by workspaces ({names}): update them to another version or delete them first."
        )
    archived = db.session.execute(
        update(TemplateVersion)
        .where(
            TemplateVersion.id == version.id,
            TemplateVersion.archived_at.is_(None),
            # Promoted meanwhile: the active version stays.
            ~exists().where(Template.active_version_id == version.id),
        )
        .values(archived_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if rows_changed(archived) != 1:
        db.session.rollback()
        db.session.refresh(version)
        if version.archived_at is None:
            raise Conflict(f"{version.name} was just made active; it is not archived.")
        return version
    db.session.commit()
    db.session.refresh(version)
    return version


def free_unused_archives(settings: Settings) -> int:
    """The maintenance loop's part: archive versions nobody can use, forget uploads past their grace period,
    and free the archives nothing needs. Returns how many archives were freed."""
    now = utcnow()
    abandoned = (
        select(TemplateVersion.id)
        .join(ProvisionerJob, ProvisionerJob.id == TemplateVersion.job_id)
        .where(
            TemplateVersion.archived_at.is_(None),
            (ProvisionerJob.status.in_((FAILED, CANCELED)) & (ProvisionerJob.completed_at < now - FAILED_IMPORT_GRACE))
            | (TemplateVersion.template_id.is_(None) & (ProvisionerJob.completed_at < now - UNPUBLISHED_GRACE)),
        )
    )
    db.session.execute(
        update(TemplateVersion)
        .where(TemplateVersion.id.in_(abandoned), TemplateVersion.archived_at.is_(None))
        .values(archived_at=now)
        .execution_options(synchronize_session=False)
    )
    db.session.execute(delete(FileUpload).where(FileUpload.uploaded_at <= now - UPLOAD_GRACE))
    in_use = versions_in_use().subquery()
    needed = (
        exists().where(ProvisionerJob.file_id == File.id, ProvisionerJob.completed_at.is_(None))
        | exists().where(
            ProvisionerJob.file_id == File.id,
            TemplateVersion.job_id == ProvisionerJob.id,
            TemplateVersion.archived_at.is_(None) | TemplateVersion.id.in_(select(in_use.c.template_version_id)),
        )
        | exists().where(FileUpload.file_id == File.id)
    )
    freed = db.session.execute(
        update(File)
        .where(File.freed_at.is_(None), ~needed)
        .values(data=b"", freed_at=now)
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    return rows_changed(freed)
