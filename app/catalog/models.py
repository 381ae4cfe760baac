from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship
from sqlalchemy.sql.expression import false, true

from app.core.columns import IdColumn, MessageListColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.encrypted_columns import EncryptedMessageListColumn
from app.core.extensions import Model
from app.core.schedules import weekdays_from_mask
from app.groups.models import ONE_SUBJECT
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.provisioning.models import ProvisionerJob
from app.users.models import User
from protocol.codec import JSON as JsonValue
from protocol.codec import JsonObject
from protocol.parameters import RichParameter
from protocol.provisionerd import NameValue, Preset, TemplateVariable
from protocol.resources import ExternalAuth, SecretRequirement


class Template(Model):
    __tablename__ = "templates"
    # A name is unique within its organisation: two organisations may each have a template called python.
    __table_args__ = (UniqueConstraint("organization_id", "name", name="uq_templates_organization_id_name"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(32))
    # Who may use it is its access list (TemplateAcl) within this organisation.
    organization_id: Mapped[str] = mapped_column(
        ForeignKey("organizations.id"), index=True, default=DEFAULT_ORGANIZATION_ID
    )
    display_name: Mapped[str] = mapped_column(String(64), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    icon: Mapped[str] = mapped_column(String(256), default="", server_default="")
    # Not empty: the template is deprecated (no new workspace; existing ones keep building) and this says why.
    deprecation_message: Mapped[str] = mapped_column(Text, default="", server_default="")
    # A deleted template stays for the history of its deleted workspaces, renamed so its name is free again.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # use_alter: templates and versions point at each other.
    active_version_id: Mapped[str | None] = mapped_column(
        ForeignKey("template_versions.id", use_alter=True, name="fk_templates_active_version_id_template_versions")
    )
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    # Schedule (reference §2.4, §3.1). Durations in milliseconds, as in the API; 0 switches the feature off.
    default_ttl_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    activity_bump_ms: Mapped[int] = mapped_column(BigInteger, default=3_600_000, server_default="3600000")
    allow_user_autostart: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    allow_user_autostop: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # The autostop requirement: a stop forced in the owner's quiet hours on these days (bit 0 = Monday … bit 6 =
    # Sunday; 0 = none), every ``weeks`` weeks.
    autostop_requirement_days: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    autostop_requirement_weeks: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    failure_ttl_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    time_til_dormant_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    time_til_dormant_autodelete_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Policy: every start by a non-admin builds the active version.
    require_active_version: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # A start or stop whose plan destroys or replaces a persistent resource (a home volume) waits for a person
    # to confirm it. Deletes never ask.
    protect_persistent_resources: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # The widest a workspace's owner may share a listening port: owner (no sharing), authenticated or public.
    max_port_share_level: Mapped[str] = mapped_column(String(16), default="owner", server_default="owner")
    # At most this many workspaces of this template per person (0: no limit; app/quotas/limits.py).
    max_workspaces_per_person: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Daily cost the template's prebuilt workspaces may use together before they are claimed (0: no limit): they
    # count against this, never against a person's quota (app/quotas/services.py).
    prebuild_budget: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "organization_id": self.organization_id,
            "name": self.name,
            "display_name": self.display_name or self.name,
            "description": self.description,
            "icon": self.icon,
            "deprecated": bool(self.deprecation_message),
            "deprecation_message": self.deprecation_message,
            "active_version_id": self.active_version_id,
            "default_ttl_ms": self.default_ttl_ms,
            "activity_bump_ms": self.activity_bump_ms,
            "allow_user_autostart": self.allow_user_autostart,
            "allow_user_autostop": self.allow_user_autostop,
            "autostop_requirement": {
                "days_of_week": weekdays_from_mask(self.autostop_requirement_days),
                "weeks": self.autostop_requirement_weeks,
            },
            "failure_ttl_ms": self.failure_ttl_ms,
            "time_til_dormant_ms": self.time_til_dormant_ms,
            "time_til_dormant_autodelete_ms": self.time_til_dormant_autodelete_ms,
            "require_active_version": self.require_active_version,
            "protect_persistent_resources": self.protect_persistent_resources,
            "max_port_share_level": self.max_port_share_level,
            "max_workspaces_per_person": self.max_workspaces_per_person,
            "prebuild_budget": self.prebuild_budget,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
        }


class TemplateAcl(Model):
    """One entry of a template's access list: a person or a group (exactly one) may ``use`` or ``admin`` it.

    The two unique indexes lead with the template, so "may U use T" probes them by key, and "which templates may
    U use" is one query whatever the number of entries (app/catalog/access.py); the subject indexes serve the
    reverse lookups (a group's templates, the cascade when a person or group is deleted)."""

    __tablename__ = "template_acl"
    __table_args__ = (
        CheckConstraint(ONE_SUBJECT, name="one_subject"),
        Index("uq_template_acl_template_id_user_id", "template_id", "user_id", unique=True),
        Index("uq_template_acl_template_id_group_id", "template_id", "group_id", unique=True),
    )

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    template_id: Mapped[str] = mapped_column(ForeignKey("templates.id", ondelete="CASCADE"))
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    group_id: Mapped[str | None] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TemplateVersion(Model):
    __tablename__ = "template_versions"
    # A template's versions newest first, a page at a time, read in the index's order (no sort of them all); it
    # also serves every lookup by template, which had an index of its own.
    # Names are unique within a template (versions of no template yet may share one: they get renamed on joining).
    __table_args__ = (
        Index("ix_template_versions_template_id_created_at", "template_id", "created_at", "id"),
        Index("uq_template_versions_template_id_name", "template_id", "name", unique=True),
    )

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    template_id: Mapped[str | None] = mapped_column(ForeignKey("templates.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    readme: Mapped[str] = mapped_column(Text, default="")
    job_id: Mapped[str] = mapped_column(ForeignKey("provisioner_jobs.id"), unique=True)
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # What changed, in the pusher's words (Coder's ``message``, ``templates push -m``); empty for older versions.
    message: Mapped[str] = mapped_column(Text, default="", server_default="")
    # An archived version is kept for its history (log, resources) but builds no new workspace, and its archive
    # no longer counts against its creator's storage quota (the maintenance loop frees it once nothing needs it).
    archived_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set by an upload that publishes: once the import succeeds the version becomes the active version of the
    # template of this name (created then if it does not exist), so nobody has to come back and click Publish.
    publish_as: Mapped[str] = mapped_column(String(32), default="", server_default="")
    # Values the uploader gave for Terraform variables, never returned by the API. Which are sensitive is known
    # only once the import has read them, so all are encrypted.
    user_variable_values: Mapped[tuple[NameValue, ...]] = mapped_column(
        EncryptedMessageListColumn(NameValue), default=()
    )
    # Filled in by the import job: Terraform variables (a sensitive one without its default, which the server
    # never needs: the daemon reads it from the template) and rich parameters of this version.
    variables: Mapped[tuple[TemplateVariable, ...]] = mapped_column(MessageListColumn(TemplateVariable), default=())
    parameters: Mapped[tuple[RichParameter, ...]] = mapped_column(MessageListColumn(RichParameter), default=())
    # The Git providers (``data "coder_external_auth"``) its workspaces need linked.
    external_auth: Mapped[tuple[ExternalAuth, ...]] = mapped_column(
        MessageListColumn(ExternalAuth), default=(), server_default="[]"
    )
    # The owner's secrets its builds may read (``data "coder_secret"``): every import records them; None for a
    # version imported before they were recorded, whose builds get all of the owner's secrets as they did then.
    secrets: Mapped[tuple[SecretRequirement, ...] | None] = mapped_column(
        MessageListColumn(SecretRequirement), default=(), nullable=True
    )
    # Tags its builds take from their parameters (data "coder_workspace_tags"): tag -> protocol.tags template.
    workspace_tags: Mapped[dict[str, str]] = mapped_column(JSON, default=dict, server_default="{}")
    # Named sets of parameter values a workspace can be created with (data "coder_workspace_preset").
    presets: Mapped[tuple[Preset, ...]] = mapped_column(MessageListColumn(Preset), default=(), server_default="[]")

    job: Mapped[ProvisionerJob] = relationship()
    author: Mapped[User] = relationship(foreign_keys=[created_by])

    def to_json(self, **job_extra: JsonValue) -> JsonObject:
        return {
            "id": self.id,
            "name": self.name,
            "template_id": self.template_id,
            "created_at": rfc3339(self.created_at),
            "message": self.message,
            # Coder's MinimalUser: who pushed it.
            "created_by": {"id": self.author.id, "username": self.author.username},
            "readme": self.readme,
            "archived": self.archived_at is not None,
            "job": self.job.to_json(**job_extra),
        }
