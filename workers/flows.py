"""What a daemon does for each job type, on top of the Terraform executor (reference §4.7).

Imports plan the start and the stop transitions without applying, to learn the template's variables, rich
parameters and resources. Builds plan and apply one transition against the workspace's previous state.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from protocol.logs import STAGE_SETUP, LogLine
from protocol.provisionerd import (
    AcquiredJob,
    BuildJob,
    BuildResult,
    ImportedResources,
    ImportJob,
    ImportResult,
    JobCompletion,
    JobFailure,
)
from workers.archive import ArchiveError, extract_archive
from workers.job_control import JobControl, RunnerSettings
from workers.provider_install import install_coder_provider
from workers.resources import ParseError, mark_lifecycles, parse_show_json
from workers.terraform import (
    TemplateSyntaxError,
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

REQUIRED_TEMPLATE_VARIABLES = "REQUIRED_TEMPLATE_VARIABLES"
LOCK_FILE = ".terraform.lock.hcl"
# The lock entry of the real coder/coder provider: its hashes can never match the provider we install.
_CODER_LOCK_ENTRY = re.compile(r'^provider "registry\.terraform\.io/coder/coder" \{.*?^\}\n?', re.MULTILINE | re.DOTALL)
# The server says "delete"; Terraform and the coder provider say "destroy".
TRANSITIONS: dict[str, Transition] = {"start": "start", "stop": "stop", "delete": "destroy"}

Log = Callable[[LogLine], None]
JobOutcome = JobCompletion | JobFailure


def run_job(job: AcquiredJob, settings: RunnerSettings, log: Log, control: JobControl) -> JobOutcome:
    try:
        with job_workdir(settings.cache_dir, job.id, log) as workdir:
            if job.workspace_build is not None:
                extract_archive(job.workspace_build.archive, workdir)
                drop_coder_lock_entry(workdir)
                return _build(job, job.workspace_build, workdir, settings, log, control)
            if job.template_import is not None:
                extract_archive(job.template_import.archive, workdir)
                drop_coder_lock_entry(workdir)
                return _import(job, job.template_import, workdir, settings, log, control)
            return _failed(f"The server sent a {job.type} job without its body.", log)
    except ArchiveError as exc:
        return _failed(f"The template archive was refused: {exc}", log)
    except TemplateSyntaxError as exc:
        return _failed(str(exc), log)
    except ParseError as exc:
        return _failed(f"The template's resources are invalid: {exc}", log)
    except TerraformError as exc:
        return JobFailure(error=exc.message, state=exc.state or None)


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


def _executor(
    workdir: Path, settings: RunnerSettings, coder_env: Mapping[str, str], log: Log, control: JobControl
) -> TerraformExecutor:
    env = terraform_environment(
        os.environ, coder_env, cache_dir=settings.cache_dir, cli_config_file=install_coder_provider(settings.cache_dir)
    )
    executor = TerraformExecutor(
        workdir,
        env=env,
        log=log,
        binary=find_terraform(settings.terraform_path),
        cancel_grace=settings.force_cancel_seconds,
    )
    control.on_cancel(executor.cancel, force=executor.kill)
    return executor


def _import(
    job: AcquiredJob, body: ImportJob, workdir: Path, settings: RunnerSettings, log: Log, control: JobControl
) -> JobOutcome:
    variables = read_variables(workdir)
    values = {item.name: item.value for item in body.user_variable_values}
    missing = required_variables_missing(variables, values)
    if missing:
        return _failed(
            f"required template variables need values: {', '.join(missing)}", log, REQUIRED_TEMPLATE_VARIABLES
        )
    plans = {}
    for transition in ("start", "stop"):
        # Like a dry run of a workspace: placeholder identity, the given transition (start_count follows it).
        coder_env = build_coder_env(
            access_url=job.access_url,
            transition=transition,
            workspace_name="import",
            workspace_id="00000000-0000-0000-0000-000000000000",
            build_id="",
            owner_name="import",
            owner_id="00000000-0000-0000-0000-000000000000",
            owner_email="import@example.com",
        )
        executor = _executor(workdir, settings, coder_env, log, control)
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
        )
    )


def _build(
    job: AcquiredJob, body: BuildJob, workdir: Path, settings: RunnerSettings, log: Log, control: JobControl
) -> JobOutcome:
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
    )
    variables = {item.name: item.value for item in body.variable_values}
    executor = _executor(workdir, settings, coder_env, log, control)
    result = executor.run_build(transition, state=body.state, variables=variables)
    resources = parse_show_json(result.state_json or {}).resources
    return JobCompletion(workspace_build=BuildResult(state=result.state, resources=tuple(resources)))
