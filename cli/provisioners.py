"""`slipway provisioner`: daemons, their jobs, and provisioner keys (owners and template admins)."""

from __future__ import annotations

import json
from typing import Any

import click

from cli.client import authenticated_client, key_value_pairs, output_option, print_table
from protocol.tags import format_tags  # the same words the dashboard uses


def _show(rows: list[dict[str, Any]], output: str, columns: list[str]) -> None:
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        row["tags"] = format_tags(row.get("tags") or {})
    print_table(rows, columns)


@click.group()
def provisioner() -> None:
    """Provisioner daemons, their jobs, and provisioner keys."""


@provisioner.command("list")
@click.option("--status", "-s", type=click.Choice(["idle", "busy", "offline"]), help="Only daemons in this state.")
@output_option
def list_daemons(status: str | None, output: str) -> None:
    """List provisioner daemons: tags, status (offline after 90 s of silence), current job."""
    rows = authenticated_client().get("/api/v2/provisionerdaemons" + (f"?status={status}" if status else ""))
    for row in rows:
        row["current"] = (row.get("current_job") or {}).get("title", "")
    _show(rows, output, ["name", "key_name", "status", "tags", "version", "last_seen_at", "current"])


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
@output_option
def list_jobs(statuses: tuple[str, ...], limit: int, output: str) -> None:
    """List jobs, newest first, with their queue position and how many daemons could take them."""
    query = "&".join([f"limit={limit}", *(f"status={status}" for status in statuses)])
    rows = authenticated_client().get(f"/api/v2/provisionerjobs?{query}")
    for row in rows:
        row["title"] = row.get("metadata", {}).get("title", "")
        row["queue"] = f"{row['queue_position']}/{row['queue_size']}" if row["queue_position"] else ""
    _show(rows, output, ["id", "title", "status", "tags", "queue", "available_workers", "worker_name", "created_at"])


@jobs.command("cancel")
@click.argument("job_id")
def cancel_job(job_id: str) -> None:
    """Cancel a pending or running job (admins: any job; members: their own workspace builds)."""
    job = authenticated_client().request("PATCH", f"/api/v2/provisionerjobs/{job_id}/cancel")
    click.echo(f"Job {job['id']} is {job['status']}.")


@provisioner.group()
def keys() -> None:
    """Provisioner keys: credentials that tie external daemons to fixed tags."""


@keys.command("create")
@click.argument("name")
@click.option("--tag", "-t", "tags", multiple=True, metavar="KEY=VALUE", help="A tag daemons using the key serve.")
def create_key(name: str, tags: tuple[str, ...]) -> None:
    """Create a key and print its secret (shown only once)."""
    reply = authenticated_client().post(
        "/api/v2/provisionerkeys", {"name": name, "tags": key_value_pairs(tags, "--tag values")}
    )
    click.echo(
        f"Created provisioner key {reply['name']} ({format_tags(reply['tags'])}). Copy it now; it is not shown again:",
        err=True,
    )
    click.echo(reply["key"])


@keys.command("list")
@output_option
def list_keys(output: str) -> None:
    """List provisioner keys (never their secrets)."""
    _show(authenticated_client().get("/api/v2/provisionerkeys"), output, ["name", "tags", "created_at"])


@keys.command("delete")
@click.argument("name")
def delete_key(name: str) -> None:
    """Delete a key; daemons using it stop at their next call."""
    authenticated_client().request("DELETE", f"/api/v2/provisionerkeys/{name}")
    click.echo(f"Deleted provisioner key {name}.")
