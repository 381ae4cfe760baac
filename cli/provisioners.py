"""`slipway provisioner`: daemons, their jobs, and provisioner keys (owners and template admins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from cli.client import (
    authenticated_client,
    decoded,
    decoded_list,
    key_value_pairs,
)
from cli.output import ListOutput, list_options
from protocol.codec import Message
from protocol.publicapi import Job, NewProvisionerKey, ProvisionerDaemon, ProvisionerKey
from protocol.tags import format_tags  # the same words the dashboard uses

M = TypeVar("M", bound=Message)


def _show(path: str, listing: ListOutput, message: type[M], row: Callable[[M], dict[str, object]]) -> None:
    """GET ``path`` and print it as ``listing`` asks, a table row per item made by ``row``."""
    answer = authenticated_client().get(path)
    listing.show(answer, lambda: [row(item) for item in decoded_list(message, answer, f"GET {path}")])


@click.group()
def provisioner() -> None:
    """Provisioner daemons, their jobs, and provisioner keys."""


@provisioner.command("list")
@click.option("--status", "-s", type=click.Choice(["idle", "busy", "offline"]), help="Only daemons in this state.")
@list_options(
    available=["name", "key_name", "status", "tags", "version", "last_seen_at", "current"],
    default=["name", "key_name", "status", "tags", "version", "last_seen_at", "current"],
)
def list_daemons(status: str | None, listing: ListOutput) -> None:
    """List provisioner daemons: tags, status (offline after 90 s of silence), current job."""

    def row(daemon: ProvisionerDaemon) -> dict[str, object]:
        current = daemon.current_job.title if daemon.current_job else ""
        return {**daemon.to_json(), "tags": format_tags(daemon.tags), "current": current}

    path = "/api/v2/provisionerdaemons" + (f"?status={status}" if status else "")
    _show(path, listing, ProvisionerDaemon, row)


_JOB_COLUMNS = ["id", "title", "status", "tags", "queue", "available_workers", "worker_name", "created_at"]


@provisioner.group()
def jobs() -> None:
    """Provisioner jobs: template imports and workspace builds."""


@jobs.command("list")
@click.option(
    "--status",
    "-s",
    "statuses",
    multiple=True,
    type=click.Choice(["pending", "running", "succeeded", "failed", "canceling", "canceled"]),
    help="Only jobs in this state (repeatable).",
)
@click.option("--limit", "-l", default=50, show_default=True, type=click.IntRange(1, 500), help="At most this many.")
@list_options(
    available=[*_JOB_COLUMNS, "type", "error", "priority", "queue_position", "queue_size"], default=_JOB_COLUMNS
)
def list_jobs(statuses: tuple[str, ...], limit: int, listing: ListOutput) -> None:
    """List jobs, newest first, with their queue position and how many daemons could take them."""
    query = "&".join([f"limit={limit}", *(f"status={status}" for status in statuses)])

    def row(job: Job) -> dict[str, object]:
        queue = f"{job.queue_position}/{job.queue_size}" if job.queue_position else ""
        return {**job.to_json(), "title": job.metadata.title, "tags": format_tags(job.tags), "queue": queue}

    _show(f"/api/v2/provisionerjobs?{query}", listing, Job, row)


@jobs.command("cancel")
@click.argument("job_id")
def cancel_job(job_id: str) -> None:
    """Cancel a pending or running job (admins: any job; members: their own workspace builds)."""
    path = f"/api/v2/provisionerjobs/{job_id}/cancel"
    job = decoded(Job, authenticated_client().request("PATCH", path), f"PATCH {path}")
    click.echo(f"Job {job.id} is {job.status}.")


@provisioner.group()
def keys() -> None:
    """Provisioner keys: credentials that tie external daemons to fixed tags."""


@keys.command("create")
@click.argument("name")
@click.option("--tag", "-t", "tags", multiple=True, metavar="KEY=VALUE", help="A tag daemons using the key serve.")
def create_key(name: str, tags: tuple[str, ...]) -> None:
    """Create a key and print its secret (shown only once)."""
    reply = authenticated_client().post(
        NewProvisionerKey, "/api/v2/provisionerkeys", {"name": name, "tags": key_value_pairs(tags, "--tag values")}
    )
    click.echo(
        f"Created provisioner key {reply.name} ({format_tags(reply.tags)}). Copy it now; it is not shown again:",
        err=True,
    )
    click.echo(reply.key)


@keys.command("list")
@list_options(available=["name", "tags", "created_at"], default=["name", "tags", "created_at"])
def list_keys(listing: ListOutput) -> None:
    """List provisioner keys (never their secrets)."""

    def row(key: ProvisionerKey) -> dict[str, object]:
        return {**key.to_json(), "tags": format_tags(key.tags)}

    _show("/api/v2/provisionerkeys", listing, ProvisionerKey, row)


@keys.command("delete")
@click.argument("name")
def delete_key(name: str) -> None:
    """Delete a key; daemons using it stop at their next call."""
    authenticated_client().request("DELETE", f"/api/v2/provisionerkeys/{name}")
    click.echo(f"Deleted provisioner key {name}.")
