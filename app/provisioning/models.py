from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    and_,
    case,
    literal,
    or_,
    text,
)
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import InstrumentedAttribute, Mapped, mapped_column
from sqlalchemy.sql.expression import false

from app.core.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.extensions import Model
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from protocol.codec import JSON as JsonValue
from protocol.codec import JsonObject
from protocol.provisionerd import JOB_TEMPLATE_IMPORT, JOB_WORKSPACE_BUILD
from protocol.tags import PRIORITY_HIGH, PRIORITY_LOW, daemon_queue_names

JOB_TYPES = (JOB_TEMPLATE_IMPORT, JOB_WORKSPACE_BUILD)

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELING, CANCELED = (
    "pending", "running", "succeeded", "failed", "canceling", "canceled",
)  # fmt: skip
# A build whose plan would destroy persistent resources, held until a person confirms or cancels it.
AWAITING_CONFIRMATION = "awaiting_confirmation"
ACTIVE_STATUSES = (PENDING, RUNNING, CANCELING, AWAITING_CONFIRMATION)
JOB_STATUSES = (PENDING, RUNNING, AWAITING_CONFIRMATION, SUCCEEDED, FAILED, CANCELING, CANCELED)
# A daemon that has not called in for this long is offline (Coder's StaleInterval).
DAEMON_STALE_AFTER = timedelta(seconds=90)


# The job input's key asking for Terraform's debug log (ProvisionerJob.debug_logging).
DEBUG_LOGGING = "debug_logging"


class ProvisionerJob(Model):
    """One template import or workspace build. Its status is derived from the timestamps, never stored."""

    __tablename__ = "provisioner_jobs"
    # Unfinished jobs are few; finished ones pile up. Every status filter but "failed" and "succeeded" only looks at
    # unfinished jobs (see `status_in`), so this index keeps them cheap however long the history grows.
    __table_args__ = (
        Index(
            "ix_provisioner_jobs_unfinished",
            "created_at",
            sqlite_where=text("completed_at IS NULL"),
            postgresql_where=text("completed_at IS NULL"),
        ),
        # A daemon's latest finished job (the Provisioners page), and the jobs to unlink when a daemon is deleted.
        Index("ix_provisioner_jobs_worker_id_completed_at", "worker_id", "completed_at"),
        # The jobs page's order (newest first, then id): page 40 is read from here after its previous page's last
        # row (app/core/keyset.py), not sorted from every job.
        Index("ix_provisioner_jobs_created_at_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    type: Mapped[str] = mapped_column(String(32))
    input: Mapped[JsonObject] = mapped_column(JSON, default=dict)
    tags: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    # The organisation of its template: only that organisation's daemons see or take it (its queue is named in the
    # organisation's namespace, and acquisition checks it again).
    organization_id: Mapped[str] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), default=DEFAULT_ORGANIZATION_ID,
        server_default=DEFAULT_ORGANIZATION_ID,
    )  # fmt: skip
    # The RQ queue of the tag set, priority and organisation (protocol.tags.queue_name): daemons waiting over HTTP
    # find their jobs by it.
    queue: Mapped[str] = mapped_column(Text, index=True)
    # The template's required_version constraints (app/catalog/terraform_requirements.py): only a daemon whose
    # Terraform satisfies them may take the job. None: any.
    required_terraform: Mapped[str | None] = mapped_column(String(255))
    # high: a person is waiting for it; low: the lifecycle executor queued it. High runs first.
    priority: Mapped[str] = mapped_column(String(8), default=PRIORITY_HIGH, server_default=PRIORITY_HIGH)
    file_id: Mapped[str] = mapped_column(ForeignKey("files.id"), index=True)
    initiator_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    worker_id: Mapped[str | None] = mapped_column(ForeignKey("provisioner_daemons.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Bumped by every report from the daemon: the heartbeat the reaper watches.
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    canceled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    # Set while the job waits for a person to confirm its plan (no daemon holds it then; it keeps started_at so
    # that no daemon takes it either). A confirmation makes it pending again.
    awaiting_confirmation_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    error_code: Mapped[str | None] = mapped_column(String(64))
    logs_length: Mapped[int] = mapped_column(Integer, default=0)
    logs_overflowed: Mapped[bool] = mapped_column(Boolean, default=False)
    logs_dropped: Mapped[int] = mapped_column(Integer, default=0)
    # How many lines the daemon has numbered so far (batches carry the number of their first line): a batch sent
    # again after a lost reply is recognised and stored once, and lines never sent (past the cap) are counted.
    log_lines_received: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When log retention trimmed the job's log (app/provisioning/retention.py); None: whole.
    logs_trimmed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @hybrid_property
    def status(self) -> str:
        """Reference §1.3, in its exact order."""
        if self.completed_at is not None:
            if self.error:
                return FAILED
            return CANCELED if self.canceled_at is not None else SUCCEEDED
        if self.error:
            return FAILED
        if self.canceled_at is not None:
            return CANCELING
        if self.awaiting_confirmation_at is not None:
            return AWAITING_CONFIRMATION
        return PENDING if self.started_at is None else RUNNING

    @status.inplace.expression
    @classmethod
    def _status_expression(cls) -> ColumnElement[str]:
        failed = cls._failed()
        return case(
            (cls.completed_at.is_not(None) & failed, literal(FAILED)),
            (cls.completed_at.is_not(None) & cls.canceled_at.is_not(None), literal(CANCELED)),
            (cls.completed_at.is_not(None), literal(SUCCEEDED)),
            (failed, literal(FAILED)),
            (cls.canceled_at.is_not(None), literal(CANCELING)),
            (cls.awaiting_confirmation_at.is_not(None), literal(AWAITING_CONFIRMATION)),
            (cls.started_at.is_(None), literal(PENDING)),
            else_=literal(RUNNING),
        )

    @classmethod
    def _failed(cls) -> ColumnElement[bool]:
        return (cls.error.is_not(None)) & (cls.error != "")

    @classmethod
    def status_in(cls, statuses: Sequence[str]) -> ColumnElement[bool]:
        """The same answer as ``status.in_(statuses)``, written so that an index can serve it: an active status
        says ``completed_at IS NULL`` (the partial index's condition) rather than hiding it in the CASE."""
        failed = cls._failed()
        unfinished = cls.completed_at.is_(None) & ~failed
        held = unfinished & cls.canceled_at.is_(None)
        queued = held & cls.awaiting_confirmation_at.is_(None)
        predicates = {
            SUCCEEDED: and_(cls.completed_at.is_not(None), ~failed, cls.canceled_at.is_(None)),
            CANCELED: and_(cls.completed_at.is_not(None), ~failed, cls.canceled_at.is_not(None)),
            FAILED: failed,
            CANCELING: unfinished & cls.canceled_at.is_not(None),
            AWAITING_CONFIRMATION: held & cls.awaiting_confirmation_at.is_not(None),
            PENDING: queued & cls.started_at.is_(None),
            RUNNING: queued & cls.started_at.is_not(None),
        }
        return or_(*(predicates[status] for status in dict.fromkeys(statuses)))

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def debug_logging(self) -> bool:
        """Whether Terraform runs with TF_LOG=debug for this job only (a person's "Retry with debug logging")."""
        return self.input.get(DEBUG_LOGGING) is True

    @classmethod
    def queue_order(cls) -> tuple[ColumnElement[int], ColumnElement[datetime], ColumnElement[str]]:
        """The order daemons take pending jobs in: high priority first, then oldest first."""
        return case((cls.priority == PRIORITY_LOW, 1), else_=0), cls.created_at.asc(), cls.id.asc()

    @classmethod
    def waiting(cls) -> ColumnElement[bool]:
        """Waiting for a daemon to take it: not started, ended or canceled."""
        return and_(cls.started_at.is_(None), cls.completed_at.is_(None), cls.canceled_at.is_(None))

    def to_json(self, **extra: JsonValue) -> JsonObject:
        return {
            "id": self.id,
            "type": self.type,
            "status": self.status,
            "file_id": self.file_id,
            "error": self.error or "",
            "error_code": self.error_code or "",
            "tags": self.tags,
            "organization_id": self.organization_id,
            "priority": self.priority,
            "required_terraform": self.required_terraform,
            "created_at": rfc3339(self.created_at),
            "started_at": rfc3339(self.started_at),
            "completed_at": rfc3339(self.completed_at),
            "canceled_at": rfc3339(self.canceled_at),
            "worker_id": self.worker_id,
            "logs_dropped": self.logs_dropped,  # lines past the log's cap, counted but not stored
            **extra,
        }


class ProvisionerJobLog(Model):
    __tablename__ = "provisioner_job_logs"
    # Every read is one job's lines in id order, from a cursor: this index finds them without walking other jobs'.
    __table_args__ = (
        Index("ix_provisioner_job_logs_job_id_id", "job_id", "id"),
        # A failed job's cause is read from its error lines (app/provisioning/failures.py): found among its
        # hundreds of thousands of lines without reading them, and a small index since errors are rare.
        Index(
            "ix_provisioner_job_logs_errors",
            "job_id",
            "id",
            sqlite_where=text("level = 'error'"),
            postgresql_where=text("level = 'error'"),
        ),
    )

    # SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a bigint identity.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("provisioner_jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    source: Mapped[str] = mapped_column(String(32))
    level: Mapped[str] = mapped_column(String(8))
    stage: Mapped[str] = mapped_column(String(128))
    output: Mapped[str] = mapped_column(Text)


class ProvisionerJobTiming(Model):
    """One bar of a job's waterfall as its daemon measured it (protocol/timings.py): a stage, or a resource's
    change within one. Read only by job, in start order."""

    __tablename__ = "provisioner_job_timings"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("provisioner_jobs.id", ondelete="CASCADE"), index=True)
    stage: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(64), default="")
    action: Mapped[str] = mapped_column(String(64), default="")
    resource: Mapped[str] = mapped_column(String(512), default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime] = mapped_column(UTCDateTime)


@dataclass(frozen=True, slots=True)
class LogLine:
    """A stored log line as readers get it: logs are read in pages of thousands and never changed, so they skip the
    ORM's per-object bookkeeping (two thirds of a 1,000-line read)."""

    id: int
    created_at: datetime
    source: str
    level: str
    stage: str
    output: str

    @staticmethod
    def columns() -> tuple[InstrumentedAttribute[Any], ...]:
        """What to select, in the order of the fields."""
        log = ProvisionerJobLog
        return log.id, log.created_at, log.source, log.level, log.stage, log.output

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "created_at": rfc3339(self.created_at),
            "source": self.source,
            "level": self.level,
            "stage": self.stage,
            "output": self.output,
        }


def queue_namespace(organization_id: str) -> str:
    """The organisation's part of its queues' names (protocol.tags.queue_name): none for the default one, whose
    queues keep the names they had before there were organisations (jobs queued across an upgrade still run)."""
    return "" if organization_id == DEFAULT_ORGANIZATION_ID else organization_id


class ProvisionerDaemon(Model):
    __tablename__ = "provisioner_daemons"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    # The label it registered under; two daemons may share it (hosts with one hostname, replicas' builtin-1).
    name: Mapped[str] = mapped_column(String(128))
    # The organisation whose jobs it runs: a key's, or the one it named when it registered (the default one).
    organization_id: Mapped[str] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, default=DEFAULT_ORGANIZATION_ID
    )
    # Who it is (workers/identity.py), which registering again matches on; None for daemons from before, which are
    # matched by name.
    instance_id: Mapped[str | None] = mapped_column(String(64), index=True)
    tags: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    version: Mapped[str] = mapped_column(String(64), default="")
    # How it authenticated: builtin, psk, key or user (the user is kept for user-scoped daemons).
    auth: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # A deleted key leaves its daemons listed (offline) until they are forgotten; they can no longer call in.
    key_id: Mapped[str | None] = mapped_column(ForeignKey("provisioner_keys.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Registered by a run-once or idle-exit daemon (an autoscaler's): offline is its normal end, not a loss.
    ephemeral: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The Terraform it runs ("terraform" or "tofu", and its version), as it said when it registered.
    terraform_binary: Mapped[str] = mapped_column(String(16), default="", server_default="")
    terraform_version: Mapped[str] = mapped_column(String(32), default="", server_default="")

    def queue_names(self, untagged_rule: str) -> list[str]:
        """The queues of the jobs it may take: of its tags, in its organisation."""
        return daemon_queue_names(self.tags, untagged_rule, queue_namespace(self.organization_id))

    @property
    def terraform(self) -> str:
        """For people: "terraform 1.11.4", or "" when it did not say."""
        return f"{self.terraform_binary} {self.terraform_version}".strip()

    @property
    def is_online(self) -> bool:
        return utcnow() - self.last_seen_at < DAEMON_STALE_AFTER

    @classmethod
    def online(cls) -> ColumnElement[bool]:
        """``is_online``, for a query."""
        return cls.last_seen_at > utcnow() - DAEMON_STALE_AFTER


class ProvisionerKey(Model):
    """A credential for external daemons that fixes their tags; only the SHA-256 of the secret is kept."""

    __tablename__ = "provisioner_keys"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    organization_id: Mapped[str] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, default=DEFAULT_ORGANIZATION_ID
    )
    hashed_secret: Mapped[str] = mapped_column(String(64), unique=True)
    tags: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def to_json(self) -> JsonObject:
        return {"id": self.id, "name": self.name, "tags": self.tags, "created_at": rfc3339(self.created_at)}
