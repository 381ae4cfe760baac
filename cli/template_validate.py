"""`slipway templates validate -d DIR`: a template's import run here, with no server, as a daemon would run it.

Template authors see what a push would find (the parameters people will be asked for, the resources a workspace
gets, the problems that would fail the import) in the seconds Terraform takes, without a version left behind.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import click

from cli.client import key_value_pairs
from protocol.codec import JSON
from protocol.healthchecks import BadExpectation, status_rule
from protocol.logs import LogLine
from protocol.parameters import ParameterError, RichParameter, check_declaration
from protocol.provisionerd import AcquiredJob, ImportJob, ImportResult, JobFailure, NameValue, Preset
from protocol.resources import Resource


@dataclass
class Validation:
    """What an import of the template found: its result when Terraform got that far, and every problem."""

    result: ImportResult | None
    problems: list[str] = field(default_factory=list)
    errors_logged: list[str] = field(default_factory=list)
    # What works only on some deployments: shown, but the template is valid.
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result is not None and not self.problems


def cache_dir() -> Path:
    """Kept between runs, as a daemon's is: the provider, Terraform's plugins and prepared inits are reused."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slipway" / "validate"


def validate_template(
    directory: Path,
    variables: dict[str, str],
    *,
    cache: Path,
    terraform_path: str | None = None,
    on_log: TextIO | None = None,
) -> Validation:
    """Run the daemon's import of ``directory`` (both plans, through the real provider), then the checks the
    server makes of what the import declares."""
    from workers.archive import pack_directory
    from workers.flows import REQUIRED_TEMPLATE_VARIABLES, run_job
    from workers.job_control import JobControl, RunnerSettings

    errors: list[str] = []
    job_id = str(uuid.uuid4())  # its own work dir: runs side by side share only the cache

    def log(line: LogLine) -> None:
        if line.level == "error":
            errors.append(line.output)
        if on_log is not None:
            on_log.write(f"{line.output}\n")

    job = AcquiredJob(
        id=job_id,
        type="template_version_import",
        tags={},
        access_url="http://127.0.0.1:3000",
        template_import=ImportJob(
            template_version_id=job_id,
            archive=pack_directory(directory),
            user_variable_values=tuple(NameValue(name=name, value=value) for name, value in variables.items()),
        ),
    )
    cache.mkdir(parents=True, exist_ok=True)
    settings = RunnerSettings(cache_dir=cache, terraform_path=terraform_path)
    outcome = run_job(job, settings, log, JobControl(job_id))
    if isinstance(outcome, JobFailure):
        # The logged errors are Terraform's diagnostics whole (file:line, the code, the detail); the outcome's
        # error is only their summary.
        problems = _diagnostics(errors) or [outcome.error or "the import failed"]
        if outcome.error_code == REQUIRED_TEMPLATE_VARIABLES:
            problems.append("Give each a value with --variable NAME=VALUE (as `templates push` takes them).")
        return Validation(None, problems, errors)
    result = outcome.template_import
    if result is None:
        return Validation(None, ["the import ended without its result"], errors)
    problems = []
    for parameter in result.parameters:
        try:
            check_declaration(parameter)
        except ParameterError as exc:
            problems.append(f"parameter {parameter.name!r}: {exc}")
    for app in (app for resource in result.resources.start for agent in resource.agents for app in agent.apps):
        try:
            status_rule(app.healthcheck.url if app.healthcheck is not None else "")
        except BadExpectation as exc:
            problems.append(f"app {app.slug!r}: {exc}")
    warnings = [
        f"app {app.slug!r} has subdomain = true: it opens only on a server with a wildcard access URL "
        "(--wildcard-access-url); elsewhere it shows as unavailable"
        for resource in result.resources.start
        for agent in resource.agents
        for app in agent.apps
        if app.subdomain
    ]
    return Validation(result, problems, errors, warnings)


def _diagnostics(error_lines: list[str]) -> list[str]:
    """Terraform prints a diagnostic over several lines, the first saying ``Error: <summary>``: one problem each."""
    problems: list[list[str]] = []
    for line in error_lines:
        if not problems or line.startswith("Error: "):
            problems.append([])
        problems[-1].append(line)
    return ["\n".join(lines).strip("\n") for lines in problems]


@click.command("validate")
@click.option(
    "--directory",
    "-d",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The template's directory.",
)
@click.option("--variable", "variables", multiple=True, metavar="NAME=VALUE", help="A value for a Terraform variable.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="Show Terraform's log as it runs.")
@click.option(
    "--terraform-path",
    envvar="SLIPWAY_TERRAFORM_PATH",
    help="Terraform binary. [default: terraform/tofu on PATH, else the bundled one]",
)
def validate(
    directory: Path, variables: tuple[str, ...], output: str, verbose: bool, terraform_path: str | None
) -> None:
    """Import DIRECTORY here, with no server, as `templates push` would: print the parameters people will be asked
    for, the resources a workspace gets, and every problem that would fail the push (exit status 1)."""
    values = key_value_pairs(variables, "--variable values")
    if output == "text":
        click.echo(f"Validating {directory} (Terraform with Slipway's coder provider, no server)...", err=True)
    found = validate_template(
        directory, values, cache=cache_dir(), terraform_path=terraform_path, on_log=sys.stderr if verbose else None
    )
    if output == "json":
        click.echo(json.dumps(_as_json(found), indent=2))
    else:
        _print(found)
    if not found.ok:
        raise SystemExit(1)


def _as_json(found: Validation) -> JSON:
    result = found.result
    return {
        "ok": found.ok,
        "problems": list(found.problems),
        "warnings": list(found.warnings),
        "parameters": [parameter.to_json() for parameter in result.parameters] if result else [],
        "resources": [resource.to_json() for resource in result.resources.start] if result else [],
        "variables": [variable.to_json() for variable in result.variables] if result else [],
        "external_auth": [provider.to_json() for provider in result.external_auth] if result else [],
        "workspace_tags": dict(result.workspace_tags) if result else {},
        "presets": [preset.to_json() for preset in result.presets] if result else [],
    }


def _print(found: Validation) -> None:
    result = found.result
    if result is not None:
        click.echo(f"Parameters ({len(result.parameters)}):")
        for parameter in sorted(result.parameters, key=lambda item: (item.order, item.name)):
            click.echo(f"  {_describe_parameter(parameter)}")
        click.echo(f"Resources when started ({len(result.resources.start)}):")
        for resource in result.resources.start:
            click.echo(f"  {_describe_resource(resource)}")
        if result.variables:
            described = (_describe_variable(item.name, item.required, item.sensitive) for item in result.variables)
            click.echo("Variables: " + ", ".join(described))
        if result.external_auth:
            click.echo("External auth: " + ", ".join(provider.id for provider in result.external_auth))
        if result.workspace_tags:
            click.echo("Workspace tags: " + ", ".join(f"{k}={v}" for k, v in sorted(result.workspace_tags.items())))
        if result.presets:
            click.echo(f"Presets ({len(result.presets)}):")
            for preset in result.presets:
                click.echo(f"  {_describe_preset(preset)}")
    for warning in found.warnings:
        click.echo(f"Warning: {warning}.", err=True)
    if found.ok:
        click.echo("No problems found: a push would import.")
        return
    click.echo(f"Problems ({len(found.problems)}):", err=True)
    for problem in found.problems:
        click.echo(textwrap.indent(problem.strip("\n"), "  "), err=True)


def _describe_parameter(parameter: RichParameter) -> str:
    traits = [parameter.type]
    if parameter.form_type:
        traits.append(parameter.form_type)
    traits.append("mutable" if parameter.mutable else "immutable")
    if parameter.ephemeral:
        traits.append("ephemeral")
    traits.append(f"default {parameter.default_value!r}" if not parameter.required else "required")
    if parameter.options:
        traits.append(f"{len(parameter.options)} options")
    shown = f"{parameter.display_name} ({parameter.name})" if parameter.display_name else parameter.name
    return f"{shown}: {', '.join(traits)}"


def _describe_preset(preset: Preset) -> str:
    values = ", ".join(f"{item.name}={item.value}" for item in preset.parameters) or "no parameters"
    default = " (default)" if preset.default else ""
    prebuilds = f"; {preset.desired_prebuild_instances} prebuilt" if preset.desired_prebuild_instances else ""
    if preset.prebuild_ttl_seconds:
        prebuilds += f", replaced after {preset.prebuild_ttl_seconds} s"
    scheduling = preset.prebuild_scheduling
    if scheduling and scheduling.schedules:
        hours = ", ".join(f"{item.instances} at {item.cron!r}" for item in scheduling.schedules)
        prebuilds += f"; by schedule ({scheduling.timezone or 'UTC'}): {hours}"
    return f"{preset.name}{default}: {values}{prebuilds}"


def _describe_resource(resource: Resource) -> str:
    parts = [resource.address or f"{resource.type}.{resource.name}"]
    for agent in resource.agents:
        apps = ", ".join(app.slug for app in agent.apps)
        parts.append(f"agent {agent.name}" + (f" (apps: {apps})" if apps else ""))
    if resource.lifecycle:
        parts.append(f"{resource.lifecycle} when stopped")
    return " — ".join(parts)


def _describe_variable(name: str, required: bool, sensitive: bool) -> str:
    notes = [note for note, on in (("required", required), ("sensitive", sensitive)) if on]
    return f"{name} ({', '.join(notes)})" if notes else name
