"""The provisioner daemon's protocol with the server (``/api/v2/provisionerd/``): every body both ways.

A daemon registers, then takes jobs — from its Redis queues (an RQ worker) when the server trusts it with Redis,
else by waiting on ``POST /jobs/wait`` — acquires each, streams its log (each batch doubles as the job's
heartbeat), and ends it with ``complete`` or ``fail``. The server decides every acquisition.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from protocol.codec import Bounds, MaxLength, Message
from protocol.logs import LogLine
from protocol.parameters import RichParameter
from protocol.resources import ExternalAuth, Resource, SecretRequirement
from protocol.timings import Timings

PSK_HEADER = "Slipway-Provisioner-PSK"
KEY_HEADER = "Slipway-Provisioner-Key"
DAEMON_HEADER = "Slipway-Provisioner-Daemon"
API_PREFIX = "/api/v2/provisionerd"
# The one function a daemon's RQ worker executes; it takes the job id and nothing else.
RUN_JOB_FUNCTION = "workers.jobs.run_provisioner_job"
MAX_BATCH_LINES = 1000
# How long a waiting daemon's POST /jobs/wait is held open when no job comes (it then simply asks again).
WAIT_SECONDS_MAX = 60

JobType = Literal["template_version_import", "workspace_build"]
JOB_TEMPLATE_IMPORT: JobType = "template_version_import"
JOB_WORKSPACE_BUILD: JobType = "workspace_build"
BuildTransition = Literal["start", "stop", "delete"]
Tags = dict[str, str]


class Registration(Message):
    name: Annotated[str, MaxLength(64)]
    tags: Tags = field(default_factory=dict)
    version: Annotated[str, MaxLength(64)] = ""
    # Started with --once or --idle-exit: it comes and goes with the work, so its silence is no alarm.
    ephemeral: bool = False
    # The Terraform it runs jobs with, as `version -json` says: "terraform" or "tofu", and e.g. "1.11.4".
    terraform_binary: Annotated[str, MaxLength(16)] = ""
    terraform_version: Annotated[str, MaxLength(32)] = ""
    # Who the daemon is (workers/identity.py: kept in its cache dir): the same after a restart, different on another
    # host whatever the name. "": a daemon from before identities, known by its name.
    instance_id: Annotated[str, MaxLength(64)] = ""
    # The organisation whose jobs it runs, by name or id (`provisionerd start --org`). "": the default one, or a
    # provisioner key's own (a key belongs to one organisation).
    organization: Annotated[str, MaxLength(64)] = ""


class Registered(Message):
    daemon_id: str
    name: str
    tags: Tags
    # The queues to listen on, and where: None means "no Redis for you: wait for jobs with POST /jobs/wait".
    queues: tuple[str, ...] = ()
    redis_url: str | None = None
    # The name of the organisation whose jobs it runs.
    organization: str = ""
    heartbeat_seconds: int = 10
    force_cancel_seconds: int = 600


class WaitForJob(Message):
    """``POST /jobs/wait``: hold the request until a job this daemon may run is pending, or timeout."""

    timeout_seconds: Annotated[int, Bounds(0, WAIT_SECONDS_MAX)] = 25


class JobOffer(Message):
    """The answer to a wait: a pending job the daemon may run. Only offered, like a queue entry: the daemon then
    acquires it (another may have been quicker), so a daemon that went away while it waited takes nothing with it."""

    job_id: str


class NameValue(Message):
    """A Terraform variable's value, or a rich parameter's (API.md's ``{name, value}``)."""

    name: str
    value: str = ""


class PrebuildSchedule(Message):
    """One ``schedule`` of a preset's ``prebuilds.scheduling``: while ``cron`` matches (Coder's five fields, the
    minute always ``*``, so whole hours), the pool holds ``instances``."""

    cron: str
    instances: int


class PrebuildScheduling(Message):
    """A preset's ``prebuilds.scheduling``: its schedules, read in ``timezone`` (an IANA name; "" is UTC)."""

    timezone: str = ""
    schedules: tuple[PrebuildSchedule, ...] = ()


class Preset(Message):
    """A named set of parameter values a workspace can be created with (``data "coder_workspace_preset"``)."""

    name: str
    parameters: tuple[NameValue, ...] = ()
    # The one preset the create form and the CLI choose when a person chooses none.
    default: bool = False
    description: str = ""
    icon: str = ""
    # How many prebuilt workspaces Coder keeps ready for it (its `prebuilds.instances`); None: no prebuilds block.
    desired_prebuild_instances: int | None = None
    # Its `prebuilds.expiration_policy.ttl`: a prebuild older than this many seconds is replaced (None or 0: never).
    prebuild_ttl_seconds: int | None = None
    # Its `prebuilds.scheduling`: instance counts by time of day (None: `desired_prebuild_instances` at all hours).
    prebuild_scheduling: PrebuildScheduling | None = None


class ImportJob(Message):
    template_version_id: str
    archive: bytes
    user_variable_values: tuple[NameValue, ...] = ()
    # Run Terraform with TF_LOG=debug (a retried import's "with debug logging"), as BuildJob.debug_logging.
    debug_logging: bool = False


class BuildMetadata(Message):
    """Who and what a build is for: the provider's ``coder_workspace`` and ``coder_workspace_owner`` read these."""

    workspace_name: str
    workspace_id: str
    workspace_build_id: str
    owner_name: str
    owner_id: str
    owner_email: str
    owner_full_name: str = ""
    owner_login_type: str = "password"
    template_id: str = ""
    template_name: str = ""
    template_version: str = ""


class BuildJob(Message):
    workspace_build_id: str
    transition: BuildTransition
    archive: bytes
    # The raw terraform.tfstate the previous build left (empty for a workspace's first build).
    state: bytes = b""
    parameters: tuple[NameValue, ...] = ()
    previous_parameters: tuple[NameValue, ...] = ()
    variable_values: tuple[NameValue, ...] = ()
    metadata: BuildMetadata
    # "<os>_<arch>" -> the agent's init script, which the provider serves as coder_agent.init_script.
    agent_scripts: dict[str, str] = field(default_factory=dict)
    # Git provider id -> the owner's fresh access token (data.coder_external_auth). Made when the job is handed
    # out, never stored with the job.
    external_auth_tokens: dict[str, str] = field(default_factory=dict)
    # The owner's secrets (data.coder_secret), by the variable the provider reads them from
    # (protocol/usersecrets.py): CODER_SECRET_ENV_<env> or CODER_SECRET_FILE_<hex of path> -> value. Made when the
    # job is handed out, never stored with the job.
    secret_env: dict[str, str] = field(default_factory=dict)
    # A start that claims a prebuilt workspace for a person: the id of each running coder_agent (in the state) ->
    # the new token it takes (the provider reads CODER_RUNNING_WORKSPACE_AGENT_TOKEN_<sha256 of the id>). Made when
    # the job is handed out, never stored with the job.
    running_agent_tokens: dict[str, str] = field(default_factory=dict)
    # Plan first, and stop for a person's confirmation when the plan destroys or replaces one of these resources
    # ("<type>.<name>", those the import found persistent: they outlive a stop, like a home volume).
    protect_persistent: bool = False
    persistent_resources: tuple[str, ...] = ()
    # The plan a person confirmed (`terraform plan -out`): applied as it is unless the state moved on since.
    confirmed_plan: bytes = b""
    # Run Terraform with TF_LOG=debug (a person's "Retry with debug logging"): this job only; its lines are
    # masked like any other.
    debug_logging: bool = False
    # Quotas apply to this build's owner: plan first, ask the server (``jobs/{id}/quota``) whether what the plan
    # costs a day fits their budget, and apply only if it does (Coder's CommitQuota, between plan and apply).
    commit_quota: bool = False


class CommitQuota(Message):
    """``jobs/{id}/quota``: what the build's plan costs a day (the daily_cost of its coder_metadata)."""

    daily_cost: Annotated[int, Bounds(0, 2**31 - 1)]


class QuotaCommitted(Message):
    """The server's answer: ``ok``, or why not (the budget, the use and what costs what), for the job's error."""

    ok: bool
    message: str = ""


class AcquiredJob(Message):
    """The reply to ``acquire`` (and to ``jobs/wait`` when a job came): exactly one of the two job bodies."""

    id: str
    type: JobType
    tags: Tags
    access_url: str
    template_import: ImportJob | None = None
    workspace_build: BuildJob | None = None
    # The server fails a job it has not heard about for this long (its hang timeout), and another daemon may then
    # run it: a daemon out of touch for nearly this long stops its Terraform. 0: not said (no such check).
    lease_seconds: int = 0
    # The number of the job's next log line: not 0 when the job ran before (a plan held for confirmation, then run
    # again), since the server stores each number once.
    first_log_seq: Annotated[int, Bounds(0, 2**62)] = 0


class LogBatch(Message):
    logs: Annotated[tuple[LogLine, ...], MaxLength(MAX_BATCH_LINES)] = ()
    # The job's number for the first line (0, 1, 2 ... across the job): a batch sent again after a lost reply is
    # stored once, and numbers skipped (lines the daemon stopped sending) are counted as dropped. None: unnumbered
    # (daemons before numbering), stored as they come.
    first_seq: Annotated[int, Bounds(0, 2**62)] | None = None


class LogBatchReply(Message):
    canceled: bool = False
    # The job's log is full: send no more lines (keep numbering them, so the server can count what was dropped).
    stop_sending: bool = False


class TemplateVariable(Message):
    name: str
    type: str = "string"
    description: str = ""
    default_value: str = ""
    required: bool = False
    sensitive: bool = False


class ImportedResources(Message):
    start: tuple[Resource, ...] = ()
    stop: tuple[Resource, ...] = ()


class ImportResult(Message):
    readme: str = ""
    variables: tuple[TemplateVariable, ...] = ()
    parameters: tuple[RichParameter, ...] = ()
    resources: ImportedResources = ImportedResources()
    external_auth: tuple[ExternalAuth, ...] = ()
    # Every data "coder_secret" of the start and stop plans: a build gets only the owner's secrets named here.
    secrets: tuple[SecretRequirement, ...] = ()
    # data "coder_workspace_tags": tag -> template over parameter values (protocol.tags.render_tag_template),
    # evaluated by the server for each build before it is queued.
    workspace_tags: dict[str, str] = field(default_factory=dict)
    # Empty from a daemon of a release before presets.
    presets: tuple[Preset, ...] = ()


class PlannedChange(Message):
    """A resource the plan destroys (or replaces, with the attributes that force it)."""

    address: str
    persistent: bool = False
    replace: bool = False
    reasons: tuple[str, ...] = ()


class PlanReview(Message):
    """A build's plan that destroys persistent resources, held for a person's confirmation."""

    destroys: tuple[PlannedChange, ...] = ()
    creates: tuple[str, ...] = ()
    updates: tuple[str, ...] = ()
    # The saved plan file, applied as it is once confirmed.
    plan: bytes = b""


class BuildResult(Message):
    state: bytes = b""
    resources: tuple[Resource, ...] = ()
    # Set instead of a result when the build stopped before applying, for a person to confirm its plan.
    review: PlanReview | None = None


class JobCompletion(Message):
    """``complete``: the result of the job's type (the other is absent)."""

    template_import: ImportResult | None = None
    workspace_build: BuildResult | None = None
    # When each stage and resource ran (empty from a daemon of a release before timings).
    timings: Timings = ()


class JobFailure(Message):
    """``fail``: why, and for a build the state Terraform left (an apply that failed part-way changed things)."""

    error: Annotated[str, MaxLength(64 * 1024)] = ""
    error_code: Annotated[str, MaxLength(64)] = ""
    state: bytes | None = None
    # What ran before the failure, as JobCompletion.timings.
    timings: Timings = ()
    # For a build whose apply failed part-way, the resources its state holds (created before the failure: they
    # exist and run); empty otherwise, and from a daemon of a release before them.
    resources: tuple[Resource, ...] = ()
