"""What a daemon does for each job type, on top of the Terraform executor (reference §4.7).

Imports plan the start and the stop transitions without applying, to learn the template's variables, rich
parameters and resources. Builds plan and apply one transition against the workspace's previous state.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from protocol.logs import STAGE_PLAN, STAGE_SETUP, LogLine
from protocol.provisionerd import (
    AcquiredJob,
    BuildJob,
    BuildResult,
    ImportedResources,
    ImportJob,
    ImportResult,
    JobCompletion,
    JobFailure,
    PlannedChange,
    PlanReview,
)
from protocol.resources import Resource
from workers.archive import ArchiveError, extract_archive
from workers.job_control import JobControl, RunnerSettings
from workers.provider_install import install_coder_provider, provider_digest
from workers.resources import ParseError, mark_lifecycles, parse_show_json
from workers.terraform import (
    ApplyResult,
    TemplateSyntaxError,
    TerraformBinary,
    TerraformError,
    TerraformExecutor,
    Transition,
    build_coder_env,
    find_terraform,
    job_workdir,
    read_readme,
    read_variables,
    required_variables_missing,
    terraform_environment,
)
from workers.terraform.binary import terraform_version
from workers.terraform.init_cache import CachedInit, InitCache
from workers.terraform.state import StateFormatError, state_to_show_json
from workers.timings import TimingRecorder
from workers.workspace_tags import WorkspaceTagsError, read_workspace_tags

REQUIRED_TEMPLATE_VARIABLES = "REQUIRED_TEMPLATE_VARIABLES"
# A build refused between plan and apply: it would take its owner over their quota.
QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
LOCK_FILE = ".terraform.lock.hcl"
# The lock entry of the real coder/coder provider: its hashes can never match the provider we install.
_CODER_LOCK_ENTRY = re.compile(r'^provider "registry\.terraform\.io/coder/coder" \{.*?^\}\n?', re.MULTILINE | re.DOTALL)
# The server says "delete"; Terraform and the coder provider say "destroy".
TRANSITIONS: dict[str, Transition] = {"start": "start", "stop": "stop", "delete": "destroy"}

Log = Callable[[LogLine], None]
JobOutcome = JobCompletion | JobFailure
# Asks the server whether a build whose plan costs this much a day may be applied: "" yes, else why not.
QuotaCheck = Callable[[int], str]


def _no_quota(daily_cost: int) -> str:
    return ""


def run_job(
    job: AcquiredJob, settings: RunnerSettings, log: Log, control: JobControl, quota: QuotaCheck = _no_quota
) -> JobOutcome:
    """Run the job; its outcome carries the timings of whatever ran, success or not."""
    timings = TimingRecorder()
    with job_workdir(settings.cache_dir, job.id, log) as workdir:
        # The failure is logged before the work dir goes: the log reads in the order things ran, the error under
        # the stage it happened in and "Cleaning up" last.
        outcome = _run_in(job, workdir, settings, timings, log, control, quota)
    return replace(outcome, timings=timings.timings())


def _run_in(
    job: AcquiredJob, workdir: Path, settings: RunnerSettings, timings: TimingRecorder, log: Log, control: JobControl,
    quota: QuotaCheck,
) -> JobOutcome:  # fmt: skip
    try:
        body = job.workspace_build or job.template_import
        if body is None:
            return _failed(f"The server sent a {job.type} job without its body.", log)
        extract_archive(body.archive, workdir)
        drop_coder_lock_entry(workdir)
        toolchain = _Toolchain.of(settings, workdir, timings)
        if job.workspace_build is not None:
            return _build(job, job.workspace_build, workdir, toolchain, log, control, quota)
        assert job.template_import is not None  # noqa: S101 - one of the two, checked above
        return _import(job, job.template_import, workdir, toolchain, log, control)
    except ArchiveError as exc:
        return _failed(f"The template archive was refused: {exc}", log)
    except TemplateSyntaxError as exc:
        return _failed(str(exc), log)
    except ParseError as exc:
        return _failed(f"The template's resources are invalid: {exc}", log)
    except TerraformError as exc:
        resources = _left_resources(exc.state) if job.workspace_build is not None else ()
        return JobFailure(error=exc.message, state=exc.state or None, resources=resources)


def _left_resources(state: bytes | None) -> tuple[Resource, ...]:
    """The resources a build's failed apply left in its state: created before the failure, they exist (a process,
    its agent), so the server lists them as the failed build's. A state that does not read leaves them out: the
    failure is still reported, with the state itself for the next build."""
    if not state:
        return ()
    try:
        return tuple(parse_show_json(state_to_show_json(state)).resources)
    except (StateFormatError, ParseError):
        return ()


def drop_coder_lock_entry(workdir: Path) -> None:
    """Templates written for Coder often ship a lock file pinning the real coder/coder provider's hashes; our
    provider replaces it, so its entry must go (other providers keep theirs)."""
    lock = workdir / LOCK_FILE
    if lock.is_file():
        text = lock.read_text()
        cleaned = _CODER_LOCK_ENTRY.sub("", text)
        if cleaned != text:
            lock.write_text(cleaned)


def _failed(message: str, log: Log, code: str = "") -> JobFailure:
    log(LogLine(level="error", stage=STAGE_SETUP, output=message, source="provisioner_daemon"))
    return JobFailure(error=message, error_code=code)


@dataclass(frozen=True)
class _Toolchain:
    """What every Terraform command of one job runs with: the daemon's settings, its Terraform, the coder
    provider's CLI config, the prepared init this job's template may reuse, and where its timings go."""

    settings: RunnerSettings
    binary: TerraformBinary
    cli_config_file: Path
    init_cache: CachedInit | None
    timings: TimingRecorder
    provider_zygote: Path | None = None

    @classmethod
    def of(cls, settings: RunnerSettings, workdir: Path, timings: TimingRecorder) -> _Toolchain:
        binary = find_terraform(settings.terraform_path)
        cli_config_file = install_coder_provider(settings.cache_dir)
        cache = InitCache(settings.cache_dir / "init-cache", settings.init_cache_bytes)
        init_cache = None
        if cache.enabled:
            version = terraform_version(binary)
            terraform = f"{version.program} {version.version} {' '.join(binary.command)}"
            # The plugin cache too: an entry's providers are links into the cache of the daemon that made it.
            toolchain = f"{terraform}\0{provider_digest(cli_config_file)}\0{settings.plugin_cache}"
            init_cache = CachedInit(cache, cache.key(workdir, toolchain))
        zygote = settings.provider_zygote.socket_for_job() if settings.provider_zygote is not None else None
        return cls(settings, binary, cli_config_file, init_cache, timings, zygote)


def _executor(
    workdir: Path,
    toolchain: _Toolchain,
    coder_env: Mapping[str, str],
    log: Log,
    control: JobControl,
    *,
    debug_logging: bool = False,
) -> TerraformExecutor:
    settings = toolchain.settings
    env = terraform_environment(
        os.environ, coder_env, plugin_cache=settings.plugin_cache, cli_config_file=toolchain.cli_config_file,
        provider_zygote=toolchain.provider_zygote,
    )  # fmt: skip
    if debug_logging:  # this job only; its lines reach the server like any other and are masked there
        env = {**env, "TF_LOG": "debug"}
    executor = TerraformExecutor(
        workdir,
        env=env,
        log=log,
        binary=toolchain.binary,
        cancel_grace=settings.force_cancel_seconds,
        init_cache=toolchain.init_cache,
        timings=toolchain.timings,
    )
    control.on_cancel(executor.cancel, force=executor.kill)
    return executor


def _import(
    job: AcquiredJob, body: ImportJob, workdir: Path, toolchain: _Toolchain, log: Log, control: JobControl
) -> JobOutcome:
    try:
        variables = read_variables(workdir)
    except TemplateSyntaxError:
        # Terraform says what is wrong in its own words (summary, file and line, the code): its init reads the
        # whole configuration first. The parser's message is only for what Terraform accepts.
        _executor(workdir, toolchain, _import_env(job, "start"), log, control, debug_logging=body.debug_logging).init()
        raise
    values = {item.name: item.value for item in body.user_variable_values}
    missing = required_variables_missing(variables, values)
    if missing:
        return _failed(
            f"required template variables need values: {', '.join(missing)}", log, REQUIRED_TEMPLATE_VARIABLES
        )
    try:
        defaults = {variable.name: variable.default_value for variable in variables if not variable.required}
        workspace_tags = read_workspace_tags(workdir, {**defaults, **values})
    except WorkspaceTagsError as exc:
        return _failed(str(exc), log)
    plans = {}
    for transition in ("start", "stop"):
        executor = _executor(
            workdir, toolchain, _import_env(job, transition), log, control, debug_logging=body.debug_logging
        )
        if transition == "start":
            executor.init()
        plans[transition] = parse_show_json(executor.plan(transition, variables=values).plan or {})
    start, stop = plans["start"], plans["stop"]
    return JobCompletion(
        template_import=ImportResult(
            readme=read_readme(workdir),
            variables=tuple(variables),
            parameters=tuple(start.parameters),
            resources=ImportedResources(
                start=tuple(mark_lifecycles(start.resources, stop.resources)), stop=tuple(stop.resources)
            ),
            external_auth=tuple(start.external_auth),
            secrets=tuple(sorted({*start.secrets, *stop.secrets}, key=lambda item: (item.env, item.file))),
            workspace_tags=workspace_tags,
            presets=tuple(start.presets),
        )
    )


def _import_env(job: AcquiredJob, transition: Transition) -> dict[str, str]:
    """Like a dry run of a workspace: placeholder identity, the given transition (start_count follows it)."""
    return build_coder_env(
        access_url=job.access_url,
        transition=transition,
        workspace_name="import",
        workspace_id="00000000-0000-0000-0000-000000000000",
        build_id="",
        owner_name="import",
        owner_id="00000000-0000-0000-0000-000000000000",
        owner_email="import@example.com",
    )


def _build(
    job: AcquiredJob, body: BuildJob, workdir: Path, toolchain: _Toolchain, log: Log, control: JobControl,
    quota: QuotaCheck,
) -> JobOutcome:  # fmt: skip
    transition = TRANSITIONS[body.transition]
    meta = body.metadata
    coder_env = build_coder_env(
        access_url=job.access_url,
        transition=transition,
        workspace_name=meta.workspace_name,
        workspace_id=meta.workspace_id,
        build_id=meta.workspace_build_id,
        owner_name=meta.owner_name,
        owner_id=meta.owner_id,
        owner_email=meta.owner_email,
        owner_full_name=meta.owner_full_name,
        owner_login_type=meta.owner_login_type,
        template_id=meta.template_id,
        template_name=meta.template_name,
        template_version=meta.template_version,
        parameters={item.name: item.value for item in body.parameters},
        previous_parameters={item.name: item.value for item in body.previous_parameters},
        agent_scripts=body.agent_scripts,
        external_auth_tokens=body.external_auth_tokens,
        secret_env=body.secret_env,
        running_agent_tokens=body.running_agent_tokens,
    )
    variables = {item.name: item.value for item in body.variable_values}
    executor = _executor(workdir, toolchain, coder_env, log, control, debug_logging=body.debug_logging)
    # A build whose state holds no resources (a workspace's first) cannot destroy one: no review to hold it for,
    # so one `terraform apply` does, instead of plan, show and apply (two Terraform runs and provider starts fewer),
    # unless the owner's quota needs the plan's cost before anything is applied.
    reviews = body.protect_persistent and (bool(body.confirmed_plan) or _holds_resources(body.state))
    costs = body.commit_quota and transition == "start"
    if transition != "destroy" and (reviews or costs):
        reviewed = _plan_then_apply(executor, transition, body, variables, log, quota if costs else None)
        if isinstance(reviewed, PlanReview):
            return JobCompletion(workspace_build=BuildResult(state=body.state, review=reviewed))
        if isinstance(reviewed, JobFailure):
            return reviewed
        result = reviewed
    else:
        result = executor.run_build(transition, state=body.state, variables=variables)
    resources = parse_show_json(result.state_json or {}).resources
    return JobCompletion(workspace_build=BuildResult(state=result.state, resources=tuple(resources)))


def _holds_resources(state: bytes) -> bool:
    """Whether a Terraform state has resources; a state that does not read as one counts as having some."""
    if not state.strip():
        return False
    try:
        resources = json.loads(state).get("resources")
    except (ValueError, AttributeError):
        return True
    return bool(resources) or not isinstance(resources, list)


def _plan_then_apply(
    executor: TerraformExecutor, transition: Transition, body: BuildJob, variables: Mapping[str, str], log: Log,
    quota: QuotaCheck | None,
) -> ApplyResult | PlanReview | JobFailure:  # fmt: skip
    """Plan, and apply that very plan file, unless it destroys a persistent resource nobody confirmed: then the
    review to show; or unless what it costs a day takes the owner over their quota (``quota``: the server says):
    then the failure, before anything changed. A confirmed plan is applied as it is, or planned again if it went
    stale (its cost was checked when it was first planned, before it waited for a person)."""
    executor.init()
    if body.confirmed_plan:
        applied = executor.apply_confirmed(transition, body.confirmed_plan, body.state)
        if applied is not None:
            return applied
    planned = executor.plan(transition, state=body.state, variables=variables)
    if quota is not None:
        daily_cost = sum(resource.daily_cost for resource in parse_show_json(planned.plan or {}).resources)
        refusal = quota(daily_cost)
        if refusal:
            log(LogLine(level="error", stage=STAGE_PLAN, source="provisioner_daemon", output=refusal))
            return JobFailure(error=refusal, error_code=QUOTA_EXCEEDED)
    review = plan_review(planned.plan or {}, set(body.persistent_resources))
    if body.protect_persistent and any(change.persistent for change in review.destroys):
        names = ", ".join(change.address for change in review.destroys if change.persistent)
        log(LogLine(level="warn", stage=STAGE_PLAN, source="provisioner_daemon",
                    output=f"This plan destroys persistent resources ({names}): waiting for the workspace's owner "
                    "or an admin to confirm it. Nothing was changed."))  # fmt: skip
        return replace(review, plan=executor.saved_plan())
    return executor.apply(transition)


def plan_review(plan: Mapping[str, Any], persistent: set[str]) -> PlanReview:
    """What a plan (`terraform show -json`) destroys, replaces, creates and updates; destroyed resources are
    marked persistent when ``persistent`` names them ("<type>.<name>", wherever the module)."""
    destroys, creates, updates = [], [], []
    for change in plan.get("resource_changes") or []:
        if change.get("mode", "managed") != "managed":
            continue
        actions = list((change.get("change") or {}).get("actions") or [])
        address = str(change.get("address", ""))
        if "delete" in actions:
            paths = (change.get("change") or {}).get("replace_paths") or []
            reasons = tuple(".".join(str(part) for part in path) for path in paths if isinstance(path, list))
            key = f"{change.get('type')}.{change.get('name')}"
            destroys.append(
                PlannedChange(address=address, persistent=key in persistent, replace="create" in actions,
                              reasons=reasons)
            )  # fmt: skip
        elif actions == ["create"]:
            creates.append(address)
        elif actions == ["update"]:
            updates.append(address)
    return PlanReview(destroys=tuple(destroys), creates=tuple(creates), updates=tuple(updates))
