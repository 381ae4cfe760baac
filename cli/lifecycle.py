"""`slipway update|restart` and `slipway schedule show|start|stop|extend` (Coder's verbs)."""

from __future__ import annotations

import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from cli.client import ApiError, SlipwayClient, authenticated_client
from cli.durations import human_duration, local_time, parse_duration
from cli.workspaces import find_workspace, follow_build, parameter_option, parse_parameters, yes_option
from protocol.codec import JSON
from protocol.publicapi import Workspace, WorkspaceBuild

_TIME = re.compile(r"^(\d{1,2})(?::(\d{2}))?\s*(am|pm)?$", re.IGNORECASE)


def _local_zone() -> str:
    zone = os.environ.get("TZ", "").lstrip(":")
    if zone and "/" in zone:
        return zone
    localtime = Path("/etc/localtime")
    if localtime.is_symlink() and "zoneinfo/" in str(localtime.resolve()):
        return str(localtime.resolve()).split("zoneinfo/", 1)[1]
    return "UTC"


def cron_schedule(at: str, days: str, zone: str) -> str:
    """``9:30AM Mon-Fri Europe/Berlin`` as ``CRON_TZ=Europe/Berlin 30 9 * * mon-fri`` (the server checks it)."""
    match = _TIME.match(at.strip())
    if match is None:
        raise click.BadParameter(f"use a time such as 9:30AM or 17:00, not {at!r}", param_hint="TIME")
    hour, minute, half = int(match.group(1)), int(match.group(2) or 0), (match.group(3) or "").lower()
    if half:
        if not 1 <= hour <= 12:
            raise click.BadParameter(f"{at!r}: with AM/PM the hour is 1-12", param_hint="TIME")
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        raise click.BadParameter(f"{at!r} is not a time of day", param_hint="TIME")
    return f"CRON_TZ={zone} {minute} {hour} * * {days.lower()}"


def _start_build(
    client: SlipwayClient, workspace: Workspace, values: list[JSON], version_id: str | None
) -> WorkspaceBuild:
    """A start build; when the server names parameters that need values and we are on a terminal, ask for them."""
    body: dict[str, JSON] = {"transition": "start", "rich_parameter_values": values}
    if version_id:
        body["template_version_id"] = version_id
    while True:
        try:
            return client.post(WorkspaceBuild, f"/api/v2/workspaces/{workspace.id}/builds", body)
        except ApiError as exc:
            asked = [item for item in exc.validations if item.field]
            if exc.status != 400 or not asked or not sys.stdin.isatty():
                raise
            click.echo(exc.message, err=True)
            given = {str(item["name"]): item for item in values if isinstance(item, dict)}
            for item in asked:
                value = click.prompt(f"{item.field} ({item.detail})")
                given[item.field] = {"name": item.field, "value": value}
            values = list(given.values())
            body["rich_parameter_values"] = values


@click.command()
@click.argument("name")
@parameter_option
@yes_option
def update(name: str, parameters: tuple[str, ...], assume_yes: bool) -> None:
    """Update workspace NAME to its template's active version (a start build), asking for any parameter the new
    version needs (or pass them with -p NAME=VALUE)."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    if not workspace.outdated:
        click.echo(f"{name} is already on the template's active version.")
        return
    build = _start_build(client, workspace, parse_parameters(parameters), workspace.template_active_version_id)
    follow_build(client, build, f"Updating {name}", assume_yes=assume_yes)


@click.command()
@click.argument("name")
@parameter_option
@yes_option
def restart(name: str, parameters: tuple[str, ...], assume_yes: bool) -> None:
    """Stop workspace NAME, then start it again (one command; each build's log is followed)."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    stop = client.post(WorkspaceBuild, f"/api/v2/workspaces/{workspace.id}/builds", {"transition": "stop"})
    follow_build(client, stop, f"Stopping {name}", assume_yes=assume_yes)
    build = _start_build(client, workspace, parse_parameters(parameters), None)
    follow_build(client, build, f"Starting {name}", assume_yes=assume_yes)


@click.command()
@click.argument("name")
@parameter_option
@click.option("--update", "update_version", is_flag=True, help="Build the template's active version if outdated.")
@yes_option
def start(name: str, parameters: tuple[str, ...], update_version: bool, assume_yes: bool) -> None:
    """Start workspace NAME and follow the build. When it is outdated, --update (or yes at the prompt) updates it
    to the template's active version."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    version_id = None
    if workspace.outdated:
        if update_version or (
            sys.stdin.isatty() and click.confirm(f"{name} is outdated. Update to the active version?", default=False)
        ):
            version_id = workspace.template_active_version_id
        elif not sys.stdin.isatty():
            click.echo(f"note: {name} is outdated; `slipway start --update {name}` updates it.", err=True)
    build = _start_build(client, workspace, parse_parameters(parameters), version_id)
    follow_build(client, build, f"{'Updating' if version_id else 'Starting'} {name}", assume_yes=assume_yes)


@click.group()
def schedule() -> None:
    """Show or set when a workspace starts and stops by itself."""


@schedule.command("show")
@click.argument("name")
def schedule_show(name: str) -> None:
    """Show workspace NAME's autostart, autostop and dormancy."""
    workspace = find_workspace(authenticated_client(), name)
    build = workspace.latest_build
    running = build.transition == "start" and workspace.status == "running"
    rows = [
        ("starts at", workspace.autostart_schedule or "manual"),
        ("next start", local_time(workspace.next_start_at) or "-"),
        ("stops after", human_duration(workspace.ttl_ms) or "the template's default"),
        ("stops at", local_time(build.deadline) if running and build.deadline else "-"),
        ("latest stop", local_time(build.max_deadline) if running and build.max_deadline else "-"),
        ("updates", workspace.automatic_updates),
    ]
    if workspace.dormant_at:
        rows.append(("dormant since", local_time(workspace.dormant_at)))
    if workspace.deleting_at:
        rows.append(("deleted at", local_time(workspace.deleting_at)))
    for label, value in rows:
        click.echo(f"{label:<14}{value}")


@schedule.command("start")
@click.argument("name")
@click.argument("at", metavar="TIME")
@click.argument("days", default="*")
@click.argument("zone", default="")
def schedule_start(name: str, at: str, days: str, zone: str) -> None:
    """Start workspace NAME at TIME (9:30AM, 17:00) on DAYS (Mon-Fri, mon,wed; default every day) in ZONE (an IANA
    name; default this machine's). TIME `manual` turns autostart off."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    schedule_text = None if at == "manual" else cron_schedule(at, days, zone or _local_zone())
    client.put(f"/api/v2/workspaces/{workspace.id}/autostart", {"schedule": schedule_text})
    click.echo(f"{name}: autostart {'off' if schedule_text is None else schedule_text}")


@schedule.command("stop")
@click.argument("name")
@click.argument("duration")
def schedule_stop(name: str, duration: str) -> None:
    """Stop workspace NAME DURATION (8h, 30m) after each start; `manual` uses the template's default. The current
    run keeps its deadline (use `schedule extend`)."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    ttl = None if duration == "manual" else int(parse_duration(duration).total_seconds() * 1000)
    client.put(f"/api/v2/workspaces/{workspace.id}/ttl", {"ttl_ms": ttl})
    click.echo(f"{name}: stops {'per the template' if ttl is None else 'after ' + human_duration(ttl)}")


@schedule.command("extend")
@click.argument("name")
@click.argument("duration")
def schedule_extend(name: str, duration: str) -> None:
    """Move running workspace NAME's autostop to DURATION from now (at least 30m)."""
    client = authenticated_client()
    workspace = find_workspace(client, name)
    deadline = datetime.now(UTC) + parse_duration(duration)
    answer = client.put(f"/api/v2/workspaces/{workspace.id}/extend", {"deadline": deadline.isoformat()})
    stamp = answer.get("deadline") if isinstance(answer, dict) else None
    click.echo(f"{name}: stops at {local_time(stamp if isinstance(stamp, str) else None)}")
