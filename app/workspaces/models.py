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
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship, validates

from app.catalog.models import Template, TemplateVersion
from app.catalog.presets import find_preset
from app.core.columns import IdColumn, MessageListColumn, UTCDateTime, new_id, utcnow
from app.core.encrypted_columns import EncryptedBytes
from app.core.extensions import Model
from app.groups.models import ONE_SUBJECT
from app.provisioning.models import ProvisionerJob
from app.users.models import User
from protocol.codec import JsonObject
from protocol.provisionerd import NameValue

TRANSITIONS = ("start", "stop", "delete")
# Why a build was queued: a person asked, or the lifecycle executor (app/lifecycle) did, for this reason.
REASON_INITIATOR = "initiator"
AUTOMATIC_REASONS = ("autostart", "autostop", "autoupdate", "failure_cleanup", "dormancy", "autodelete")
BUILD_REASONS = (REASON_INITIATOR, *AUTOMATIC_REASONS)
AUTOMATIC_UPDATES = ("never", "always")


class Workspace(Model):
    __tablename__ = "workspaces"
    # A name is taken only while its workspace exists (a deleted one frees it), and in any case: "Dev" and "dev"
    # are one name, as people and URLs treat them. The database decides, so two requests at once cannot both win.
    __table_args__ = (
        Index(
            "uq_workspaces_owner_id_name_key",
            "owner_id",
            "name_key",
            unique=True,
            sqlite_where=text("deleted = 0"),
            postgresql_where=text("deleted = false"),
        ),
        # Lists are ordered by name: the first page of 10,000 is read from the index, not sorted from them all.
        Index("ix_workspaces_name_key_id", "name_key", "id"),
    )

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(32))
    # lower(name), kept by `_keep_name_key`: a plain column rather than an index on lower(name), which SQLite's
    # table rebuilds (Alembic batch migrations) cannot reflect and would silently drop.
    name_key: Mapped[str] = mapped_column(String(32))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    template_id: Mapped[str] = mapped_column(ForeignKey("templates.id"), index=True)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    # Life after create (API.md "Workspace lifecycle").
    automatic_updates: Mapped[str] = mapped_column(String(8), default="never", server_default="never")
    # ``CRON_TZ=<zone> <min> <hour> * * <days>`` (app/core/schedules.py), and the next time it fires: the executor
    # finds due workspaces by this indexed column, never by reading every schedule.
    autostart_schedule: Mapped[str | None] = mapped_column(String(128))
    next_start_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    # Autostop after a start; None = the template's default_ttl_ms.
    ttl_ms: Mapped[int | None] = mapped_column(BigInteger)
    last_used_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    dormant_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    deleting_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    # The newest build's id, kept by the one place that queues builds: a filter on the latest build's status reads
    # one build per workspace by key, where finding each workspace's newest of all its builds cost 300 ms at
    # 10,000. No foreign key: builds already point at their workspace, and a cycle would order every insert.
    latest_build_id: Mapped[str | None] = mapped_column(String(36))

    owner: Mapped[User] = relationship()
    template: Mapped[Template] = relationship()

    @validates("name")
    def _keep_name_key(self, key: str, name: str) -> str:
        self.name_key = name.lower()
        return name


class WorkspaceAcl(Model):
    """One entry of a workspace's sharing list: a person or a group (exactly one) may ``use`` it (connect, start,
    stop) or ``admin`` it (also parameters, schedule, delete). Indexed as TemplateAcl, for the same queries."""

    __tablename__ = "workspace_acl"
    __table_args__ = (
        CheckConstraint(ONE_SUBJECT, name="one_subject"),
        Index("uq_workspace_acl_workspace_id_user_id", "workspace_id", "user_id", unique=True),
        Index("uq_workspace_acl_workspace_id_group_id", "workspace_id", "group_id", unique=True),
    )

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    group_id: Mapped[str | None] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WorkspaceBuild(Model):
    __tablename__ = "workspace_builds"
    __table_args__ = (UniqueConstraint("workspace_id", "build_number", name="uq_workspace_builds_workspace_id_number"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"), index=True)
    build_number: Mapped[int] = mapped_column(Integer)
    transition: Mapped[str] = mapped_column(String(8))
    template_version_id: Mapped[str] = mapped_column(ForeignKey("template_versions.id"))
    job_id: Mapped[str] = mapped_column(ForeignKey("provisioner_jobs.id"), unique=True)
    initiator_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    # Raw terraform.tfstate bytes, handed to the next build (kept when an apply failed part-way). Encrypted: it
    # holds the agents' tokens and whatever secrets providers keep there. Loaded only when a build job needs it.
    state: Mapped[bytes | None] = mapped_column(EncryptedBytes(), deferred=True)
    parameters: Mapped[tuple[NameValue, ...]] = mapped_column(MessageListColumn(NameValue), default=())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    reason: Mapped[str] = mapped_column(String(16), default=REASON_INITIATOR, server_default=REASON_INITIATOR)
    # A succeeded start stops at ``deadline`` (completion + TTL, moved by activity and extend), and never later
    # than ``max_deadline`` (the template's autostop requirement). Both None: no autostop.
    deadline: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    max_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The plan a person is asked to confirm (what it destroys, creates, updates: protocol PlanReview without the
    # file), and the plan file itself, encrypted like the state it embeds. Kept after it ran: what was confirmed.
    plan_review: Mapped[JsonObject | None] = mapped_column(JSON)
    # The version's preset it was built with (Coder's template_version_preset_id): its values won over the person's.
    template_version_preset_id: Mapped[str | None] = mapped_column(String(36))
    saved_plan: Mapped[bytes | None] = mapped_column(EncryptedBytes(), deferred=True)
    # What its plan costs a day, as the quota check accepted it (app/workspaces/quotas.py): counted for its owner
    # while the build runs, before its resources are recorded. None: not checked (quotas off, a stop, a delete).
    daily_cost: Mapped[int | None] = mapped_column(Integer)

    workspace: Mapped[Workspace] = relationship()
    job: Mapped[ProvisionerJob] = relationship()
    template_version: Mapped[TemplateVersion] = relationship()
    # Who asked for it (for an automatic build: whoever the lifecycle executor acts for).
    initiator: Mapped[User] = relationship()

    @property
    def preset_name(self) -> str:
        """The name of the preset it was built with; empty when none (or its version no longer lists it)."""
        wanted = self.template_version_preset_id
        preset = find_preset(self.template_version, wanted) if wanted else None
        return preset.name if preset else ""
