"""What a daemon does for each job type, on top of the Terraform executor (reference §4.7).

Imports plan the start and the stop transitions without applying, to learn the template's variables, rich
parameters and resources. Builds plan and apply one transition against the workspace's previous state.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workers.archive import ArchiveError, extract_archive
from workers.jobs import DaemonContext, JobControl, JobOutcome
from workers.provider_install import install_coder_provider
from workers.resources import ParseError, parse_parameters, parse_resources
from workers.terraform import (
    LogLine,
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

Emit = Callable[[dict[str, Any]], None]


def run_job(payload: dict[str, Any], context: DaemonContext, emit: Emit, control: JobControl) -> JobOutcome:
    def log(line: LogLine) -> None:
        emit({"level": line.level, "stage": line.stage, "output": line.output, "source": line.source})

    try:
        with job_workdir(context.cache_dir, payload["id"], log) as workdir:
            extract_archive(base64.b64decode(payload["archive"]), workdir)
            drop_coder_lock_entry(workdir)
            if payload["type"] == "workspace_build":
                return _build(payload, workdir, context, log, control)
            return _import(payload, workdir, context, log, control)
    except ArchiveError as exc:
        return _failed(f"The template archive was refused: {exc}", log)
    except TemplateSyntaxError as exc:
        return _failed(str(exc), log)
    except ParseError as exc:
        return _failed(f"The template's resources are invalid: {exc}", log)
    except TerraformError as exc:
        body: dict[str, Any] = {"error": exc.message}
        if exc.state:
            body["state"] = base64.b64encode(exc.state).decode()
        return JobOutcome(False, body)


def drop_coder_lock_entry(workdir: Path) -> None:
    """Templates written for Coder often ship a lock file pinning the real coder/coder provider's hashes; our
    provider replaces it, so its entry must go (other providers keep theirs)."""
    lock = workdir / LOCK_FILE
    if lock.is_file():
        text = lock.read_text()
        cleaned = _CODER_LOCK_ENTRY.sub("", text)
        if cleaned != text:
            lock.write_text(cleaned)


def _failed(message: str, log: Callable[[LogLine], None], code: str = "") -> JobOutcome:
    log(LogLine("error", "Setting up", message, source="provisioner_daemon"))
    return JobOutcome(False, {"error": message, "error_code": code})


def _executor(
    workdir: Path,
    context: DaemonContext,
    coder_env: Mapping[str, str],
    log: Callable[[LogLine], None],
    control: JobControl,
) -> TerraformExecutor:
    env = terraform_environment(
        os.environ, coder_env, cache_dir=context.cache_dir, cli_config_file=install_coder_provider(context.cache_dir)
    )
    executor = TerraformExecutor(
        workdir,
        env=env,
        log=log,
        binary=find_terraform(context.terraform_path),
        cancel_grace=context.force_cancel_seconds,
    )
    control.on_cancel(executor.cancel, force=executor.kill)
    return executor


def _import(
    payload: dict[str, Any], workdir: Path, context: DaemonContext, log: Callable[[LogLine], None], control: JobControl
) -> JobOutcome:
    variables = read_variables(workdir)
    values = {item["name"]: item["value"] for item in payload.get("user_variable_values") or []}
    missing = required_variables_missing(variables, values)
    if missing:
        return _failed(
            f"required template variables need values: {', '.join(missing)}", log, REQUIRED_TEMPLATE_VARIABLES
        )
    plans = {}
    for transition in ("start", "stop"):
        # Like a dry run of a workspace: placeholder identity, the given transition (start_count follows it).
        coder_env = build_coder_env(
            access_url=payload["access_url"],
            transition=transition,
            workspace_name="import",
            workspace_id="00000000-0000-0000-0000-000000000000",
            build_id="",
            owner_name="import",
            owner_id="00000000-0000-0000-0000-000000000000",
            owner_email="import@example.com",
        )
        executor = _executor(workdir, context, coder_env, log, control)
        if transition == "start":
            executor.init()
        plans[transition] = executor.plan(transition, variables=values).plan or {}
    return JobOutcome(
        True,
        {
            "readme": read_readme(workdir),
            "variables": [
                {
                    "name": var.name,
                    "type": var.type,
                    "description": var.description,
                    "default_value": var.default_value,
                    "required": var.required,
                    "sensitive": var.sensitive,
                }
                for var in variables
            ],
            "parameters": parse_parameters(plans["start"]),
            "resources": {transition: parse_resources(plan) for transition, plan in plans.items()},
        },
    )


def _build(
    payload: dict[str, Any], workdir: Path, context: DaemonContext, log: Callable[[LogLine], None], control: JobControl
) -> JobOutcome:
    transition = TRANSITIONS[payload["transition"]]
    meta = payload["metadata"]
    coder_env = build_coder_env(
        access_url=payload["access_url"],
        transition=transition,
        workspace_name=meta["workspace_name"],
        workspace_id=meta["workspace_id"],
        build_id=meta["workspace_build_id"],
        owner_name=meta["owner_name"],
        owner_id=meta["owner_id"],
        owner_email=meta["owner_email"],
        owner_full_name=meta.get("owner_full_name", ""),
        owner_login_type=meta.get("owner_login_type", "password"),
        template_id=meta.get("template_id", ""),
        template_name=meta.get("template_name", ""),
        template_version=meta.get("template_version", ""),
        parameters={item["name"]: item["value"] for item in payload.get("parameters") or []},
        previous_parameters={item["name"]: item["value"] for item in payload.get("previous_parameters") or []},
        agent_scripts=payload.get("agent_scripts") or {},
    )
    variables = {item["name"]: item["value"] for item in payload.get("variable_values") or []}
    executor = _executor(workdir, context, coder_env, log, control)
    result = executor.run_build(transition, state=base64.b64decode(payload.get("state") or ""), variables=variables)
    return JobOutcome(
        True,
        {
            "state": base64.b64encode(result.state).decode(),
            "resources": parse_resources(result.state_json or {}),
        },
    )
