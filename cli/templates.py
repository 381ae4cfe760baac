"""`slipway templates push|list|versions list`."""

from __future__ import annotations

from pathlib import Path

import click

from cli.client import (
    SlipwayClient,
    authenticated_client,
    decoded,
    decoded_list,
    key_value_pairs,
    print_json,
    print_table,
)
from cli.follow import follow_job, report
from protocol.codec import JSON
from protocol.publicapi import Template, TemplateVersion, UploadedFile


@click.group()
def templates() -> None:
    """Manage templates (template admins and owners)."""


@templates.command("push")
@click.argument("name")
@click.option(
    "-d",
    "--directory",
    default=".",
    show_default=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The template's directory.",
)
@click.option(
    "--provisioner-tag",
    "tags",
    multiple=True,
    metavar="KEY=VALUE",
    help="Run this template's jobs on daemons with this tag.",
)
@click.option("--variable", "variables", multiple=True, metavar="NAME=VALUE", help="A value for a Terraform variable.")
@click.option("--activate/--no-activate", default=True, show_default=True, help="Make the new version the active one.")
@click.option("--version-name", default="", help="A name for the new version (default: generated).")
def push(
    name: str, directory: Path, tags: tuple[str, ...], variables: tuple[str, ...], activate: bool, version_name: str
) -> None:
    """Upload DIRECTORY as a new version of template NAME (created if needed) and show the import log."""
    from workers.archive import pack_directory

    client = authenticated_client()
    archive = pack_directory(directory)
    click.echo(f"Uploading {directory} ({len(archive) / 1024:.1f} KiB)...")
    answer = client.request("POST", "/api/v2/files", content=archive, headers={"Content-Type": "application/x-tar"})
    uploaded = decoded(UploadedFile, answer, "POST /api/v2/files")
    existing = _template_named(client, name)
    body: dict[str, JSON] = {
        "file_id": uploaded.id,
        "name": version_name,
        "provisioner_tags": key_value_pairs(tags, "--provisioner-tag values"),
        "user_variable_values": [
            {"name": k, "value": v} for k, v in key_value_pairs(variables, "--variable values").items()
        ],
    }
    if existing is not None:
        body["template_id"] = existing.id
    version = client.post(TemplateVersion, "/api/v2/templateversions", body)
    end = follow_job(client, f"/api/v2/templateversions/{version.id}/logs", version.job)
    report(end, f"Import of {name} ({version.name})")
    if existing is None:
        client.post(Template, "/api/v2/templates", {"name": name, "version_id": version.id})
        click.echo(f"Created template {name} with version {version.name}.")
    elif activate:
        client.request("PATCH", f"/api/v2/templates/{existing.id}/versions", json={"id": version.id})
        click.echo(f"Version {version.name} is now the active version of {name}.")


def _template_named(client: SlipwayClient, name: str) -> Template | None:
    found = client.get_list(Template, f"/api/v2/templates?name={name}")
    return found[0] if found else None


@templates.command("list")
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
def list_templates(output: str) -> None:
    """List templates."""
    answer = authenticated_client().get("/api/v2/templates")
    if output == "json":
        print_json(answer)
        return
    rows = [template.to_json() for template in decoded_list(Template, answer, "GET /api/v2/templates")]
    print_table(rows, ["name", "display_name", "active_version_id", "created_at"])


@templates.group("versions")
def versions() -> None:
    """Versions of a template."""


@versions.command("list")
@click.argument("name")
def list_versions(name: str) -> None:
    """List the versions of template NAME, newest first."""
    client = authenticated_client()
    template = _template_named(client, name)
    if template is None:
        raise click.ClickException(f"No template named {name!r}.")
    rows = [
        {
            "name": version.name,
            "status": version.job.status,
            "active": "yes" if version.id == template.active_version_id else "",
            "created_at": version.created_at,
        }
        for version in client.get_list(TemplateVersion, f"/api/v2/templates/{template.id}/versions")
    ]
    print_table(rows, ["name", "status", "active", "created_at"])
