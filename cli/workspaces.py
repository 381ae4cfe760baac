"""`slipway create|start|stop|delete|list|show`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

import click

from cli.client import SlipwayClient, authenticated_client, decoded_list
from cli.config import organization_option
from cli.durations import human_duration, local_time
from cli.follow import follow_job, print_log_line, report
from cli.output import ListOutput, list_options
from protocol.codec import JSON
from protocol.logs import JobLog, LogStreamEnd
from protocol.publicapi import (
    AgentLog,
    BuildParameter,
    Preset,
    Template,
    Workspace,
    WorkspaceBuild,
    WorkspaceResource,
)

if TYPE_CHECKING:
    from protocol.provisionerd import PlanReview


def find_workspace(client: SlipwayClient, name: str) -> Workspace:
    """Your workspace ``name``, or ``owner/name``: someone else's that is shared with you (Coder's spelling)."""
    owner, slash, bare = name.rpartition("/")
    if not slash:
        found = client.get_list(Workspace, f"/api/v2/workspaces?{urlencode({'owner': 'me', 'name': name})}")
        if not found:
            raise click.ClickException(f"You have no workspace named {name!r} (see `slipway list`).")
        return found[0]
    query = urlencode({"name": bare, "q": f"owner:{owner}"})
    found = client.get_list(Workspace, f"/api/v2/workspaces?{query}")
    if not found:
        raise click.ClickException(f"No workspace {name!r} that you may see (see `slipway list`).")
    return found[0]


def parse_parameters(values: tuple[str, ...]) -> list[JSON]:
    parsed: list[JSON] = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"parameters look like name=value, got {item!r}", param_hint="--parameter")
        parsed.append({"name": key, "value": value})
    return parsed


def follow_build(client: SlipwayClient, build: WorkspaceBuild, what: str, *, assume_yes: bool = False) -> None:
    """Follow the build's log to its end; a plan held for confirmation is shown and confirmed (``--yes``, or yes
    at the prompt) and then followed, or declined (the build is canceled)."""
    # Here, not at the top: protocol.provisionerd brings the parameter rules and RE2, which `list` and `show` (which
    # import this module) never need, and a CLI command must start at once (tests/test_cli_imports.py).
    from protocol.provisionerd import PlanReview

    logs = f"/api/v2/workspacebuilds/{build.id}/logs"
    end = follow_job(client, logs, build.job)
    while end.status == "awaiting_confirmation":
        review = client.get_one(PlanReview, f"/api/v2/workspacebuilds/{build.id}/plan")
        _print_review(review)
        if not assume_yes and not sys.stdin.isatty():
            raise click.ClickException(
                f"{what}: the plan destroys persistent resources and waits for confirmation. Run the command again "
                "with --yes, confirm it on the build's page, or cancel it."
            )
        if not assume_yes and not click.confirm("Apply this plan?", default=False):
            client.request("PATCH", f"/api/v2/workspacebuilds/{build.id}/cancel")
            raise click.ClickException(f"{what} canceled: the plan was not confirmed, nothing was changed.")
        lines = read_log(client, logs)  # the job is idle now: nothing is logged until it is confirmed
        client.request("POST", f"/api/v2/workspacebuilds/{build.id}/confirm")
        end = follow_job(client, logs, after=lines[-1].id if lines else 0)
    report(end, what, page_url=f"{client.url}/builds/{build.id}")


def read_log(client: SlipwayClient, path: str) -> list[JobLog]:
    """Every line of a job's log so far: the server answers a page per call, the next after the last id read."""
    lines: list[JobLog] = []
    while page := client.get_list(JobLog, f"{path}?after={lines[-1].id if lines else 0}"):
        lines.extend(page)
    return lines


def _print_review(review: PlanReview) -> None:
    click.secho("This plan destroys persistent resources:", fg="yellow", bold=True)
    for change in review.destroys:
        because = f" (forced by {', '.join(change.reasons)})" if change.reasons else ""
        marker = " [persistent]" if change.persistent else ""
        click.echo(f"  {'replace' if change.replace else 'destroy'} {change.address}{marker}{because}")
    if review.creates or review.updates:
        click.echo(f"  and {len(review.creates)} to create, {len(review.updates)} to update")


yes_option = click.option(
    "--yes", "-y", "assume_yes", is_flag=True, help="Confirm a plan that destroys persistent resources without asking."
)


parameter_option = click.option(
    "--parameter", "-p", "parameters", multiple=True, metavar="NAME=VALUE", help="A rich parameter value."
)


NO_PRESET = "none"


@click.command()
@click.argument("name")
@click.option("--template", "-t", required=True, help="The template to build it from.")
@organization_option()
@parameter_option
@click.option(
    "--preset",
    default="",
    metavar="NAME",
    help="A preset of the template's parameter values (default: the template's default preset; 'none': no preset).",
)
def create(name: str, template: str, organization: str, parameters: tuple[str, ...], preset: str) -> None:
    """Create workspace NAME from a template of the organisation and follow its first build."""
    client = authenticated_client()
    # Template names are unique within an organisation: the server's 404 says which one it looked in.
    found = client.get_one(Template, f"/api/v2/organizations/{quote(organization)}/templates/{quote(template)}")
    body: dict[str, JSON] = {
        "template_id": found.id,
        "name": name,
        "rich_parameter_values": parse_parameters(parameters),
    }
    chosen = _chosen_preset(client, found, preset)
    if chosen is not None:
        body["template_version_id"] = found.active_version_id
        body["template_version_preset_id"] = chosen.ID
        values = ", ".join(f"{item.Name}={item.Value}" for item in chosen.Parameters)
        click.echo(f"Preset '{chosen.Name}' applied" + (f": {values}" if values else "."))
    workspace = client.post(Workspace, "/api/v2/workspaces", body)
    follow_build(client, workspace.latest_build, f"Workspace {name}")


def _chosen_preset(client: SlipwayClient, template: Template, wanted: str) -> Preset | None:
    """The preset of the template's active version named ``wanted``; with no name, its default preset (Coder's
    CLI does the same when it cannot ask)."""
    if wanted.lower() == NO_PRESET or template.active_version_id is None:
        return None
    presets = client.get_list(Preset, f"/api/v2/templateversions/{template.active_version_id}/presets")
    if not wanted:
        return next((preset for preset in presets if preset.Default), None)
    chosen = next((preset for preset in presets if preset.Name == wanted), None)
    if chosen is None:
        names = ", ".join(preset.Name for preset in presets)
        available = f"its presets: {names}" if names else "it has none"
        raise click.ClickException(f"Template {template.name} has no preset named {wanted!r} ({available}).")
    return chosen


def _transition_command(transition: str, verb: str, progressive: str) -> click.Command:
    @click.command(transition, help=f"{verb} workspace NAME and follow the build.")
    @click.argument("name")
    @parameter_option
    @yes_option
    def command(name: str, parameters: tuple[str, ...], assume_yes: bool) -> None:
        client = authenticated_client()
        workspace = find_workspace(client, name)
        body: JSON = {"transition": transition, "rich_parameter_values": parse_parameters(parameters)}
        build = client.post(WorkspaceBuild, f"/api/v2/workspaces/{workspace.id}/builds", body)
        follow_build(client, build, f"{progressive} {name}", assume_yes=assume_yes)

    return command


stop = _transition_command("stop", "Stop", "Stopping")
delete = _transition_command("delete", "Delete", "Deleting")


_WORKSPACE_COLUMNS = ["name", "owner", "template", "status", "build", "outdated", "starts-at", "stops-after"]


@click.command("list")
@click.option(
    "--search",
    "-s",
    default="",
    metavar="FILTER",
    help="Coder's filter, e.g. 'owner:me status:running template:docker outdated:true name:dev'.",
)
@list_options(available=[*_WORKSPACE_COLUMNS, "id", "version", "autostart", "last-used-at"], default=_WORKSPACE_COLUMNS)
def list_workspaces(search: str, listing: ListOutput) -> None:
    """List your workspaces (admins: everyone's)."""
    client = authenticated_client()
    answer = client.get(f"/api/v2/workspaces?{urlencode({'q': search})}" if search else "/api/v2/workspaces")
    listing.show(
        answer,
        lambda: [_workspace_row(workspace) for workspace in decoded_list(Workspace, answer, "GET /api/v2/workspaces")],
    )


def _workspace_row(workspace: Workspace) -> dict[str, object]:
    return {
        "name": workspace.name,
        "owner": workspace.owner_name,
        "template": workspace.template_name,
        "status": _status(workspace),
        "build": workspace.latest_build.build_number,
        "outdated": "yes" if workspace.outdated else "",
        "starts-at": local_time(workspace.next_start_at),
        "stops-after": human_duration(workspace.ttl_ms),
        "id": workspace.id,
        "version": workspace.latest_build.template_version_name,
        "autostart": workspace.autostart_schedule,
        "last-used-at": workspace.last_used_at,
    }


def _status(workspace: Workspace) -> str:
    if workspace.deleting_at:
        return f"{workspace.status}, dormant, deleted {local_time(workspace.deleting_at)}"
    return f"{workspace.status}, dormant" if workspace.dormant_at else workspace.status


@click.command()
@click.argument("name")
def show(name: str) -> None:
    """Show workspace NAME: status, parameters, resources and agents."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    build = workspace.latest_build
    click.echo(f"{workspace.name}  ({workspace.template_name}, owner {workspace.owner_name})")
    click.echo(f"status: {workspace.status}   build #{build.build_number} {build.transition}")
    click.echo(f"version: {build.template_version_name}")
    if build.job.error:
        click.echo(f"error: {build.job.error}")
    for parameter in client.get_list(BuildParameter, f"/api/v2/workspacebuilds/{build.id}/parameters"):
        click.echo(f"parameter {parameter.name} = {parameter.value}")
    for resource in client.get_list(WorkspaceResource, f"/api/v2/workspacebuilds/{build.id}/resources"):
        click.echo(f"resource {resource.type}.{resource.name} ({resource.kind})")
        for agent in resource.agents:
            platform = f"{agent.os}/{agent.arch}"
            click.echo(f"  agent {agent.name}: {agent.status}, {agent.lifecycle_state} ({platform})")


@click.command()
@click.argument("name")
@click.option("--follow", "-f", is_flag=True, help="Keep printing lines until the build ends.")
@click.option("--build", "build_number", type=int, help="Show this build number (default: the latest).")
def logs(name: str, follow: bool, build_number: int | None) -> None:
    """Print the log of a build of workspace NAME; exit non-zero when that build failed or was canceled."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    build = workspace.latest_build
    if build_number is not None:
        builds = client.get_list(WorkspaceBuild, f"/api/v2/workspaces/{workspace.id}/builds")
        matches = [item for item in builds if item.build_number == build_number]
        if not matches:
            raise click.ClickException(f"{name} has no build #{build_number}.")
        build = matches[0]
    path = f"/api/v2/workspacebuilds/{build.id}/logs"
    what = f"Build #{build.build_number} ({build.transition})"
    page_url = f"{client.url}/builds/{build.id}"
    if follow:
        report(follow_job(client, path, build.job), what, page_url=page_url)
        _print_agent_logs(client, build.id)
        return
    stage = None
    for line in read_log(client, path):
        stage = print_log_line(line, stage)
    job = client.get_one(WorkspaceBuild, f"/api/v2/workspacebuilds/{build.id}").job
    _print_agent_logs(client, build.id)
    if job.status in ("failed", "canceled"):
        report(LogStreamEnd(status=job.status, error=job.error or "", failure=job.failure), what, page_url=page_url)


def _print_agent_logs(client: SlipwayClient, build_id: str) -> None:
    """After a build's own log, what its agents' scripts printed (startup scripts first, as Coder's CLI does)."""
    for resource in client.get_list(WorkspaceResource, f"/api/v2/workspacebuilds/{build_id}/resources"):
        for agent in resource.agents:
            sources = {source.id: source.display_name for source in agent.log_sources}
            shown = None
            for line in client.get_list(AgentLog, f"/api/v2/workspaceagents/{agent.id}/logs"):
                heading = f"==> Agent {agent.name}: {sources.get(line.source_id or '', 'agent')}"
                if heading != shown:
                    shown = heading
                    click.secho(heading, bold=True)
                click.echo(f"    {line.output}")
