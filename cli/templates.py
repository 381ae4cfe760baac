"""`slipway templates push|list|edit|delete|pull|versions list|archive|unarchive|permissions`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import click

from cli.client import (
    SlipwayClient,
    authenticated_client,
    decoded,
    decoded_list,
    key_value_pairs,
)
from cli.durations import parse_duration
from cli.follow import follow_job, report
from cli.output import ListOutput, list_options
from protocol.codec import JSON
from protocol.publicapi import AclAvailable, ProvisionerDaemon, Template, TemplateAcl, TemplateVersion, UploadedFile


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
@click.option("-m", "--message", default="", help="What changed in this version (shown with it and its author).")
def push(
    name: str,
    directory: Path,
    tags: tuple[str, ...],
    variables: tuple[str, ...],
    activate: bool,
    version_name: str,
    message: str,
) -> None:
    """Upload DIRECTORY as a new version of template NAME (created if needed) and show the import log."""
    from workers.archive import pack_directory

    client = authenticated_client()
    provisioner_tags = key_value_pairs(tags, "--provisioner-tag values")
    _say_who_builds(client, provisioner_tags)
    archive = pack_directory(directory)
    click.echo(f"Uploading {directory} ({len(archive) / 1024:.1f} KiB)...")
    answer = client.request("POST", "/api/v2/files", content=archive, headers={"Content-Type": "application/x-tar"})
    uploaded = decoded(UploadedFile, answer, "POST /api/v2/files")
    existing = _template_named(client, name)
    body: dict[str, JSON] = {
        "file_id": uploaded.id,
        "name": version_name,
        "message": message,
        "provisioner_tags": dict(provisioner_tags),
        "user_variable_values": [
            {"name": k, "value": v} for k, v in key_value_pairs(variables, "--variable values").items()
        ],
    }
    if existing is not None:
        body["template_id"] = existing.id
    version = client.post(TemplateVersion, "/api/v2/templateversions", body)
    if version.job.waiting_for_terraform:  # the tags match daemons, but not one runs a Terraform it allows
        click.echo(
            f"warning: no online provisioner daemon can import it: it {version.job.waiting_for_terraform}. It waits, "
            "pending, until one with such a Terraform starts (slipway provisionerd start --terraform-path ...).",
            err=True,
        )
    end = follow_job(client, f"/api/v2/templateversions/{version.id}/logs", version.job)
    report(end, f"Import of {name} ({version.name})", page_url=f"{client.url}/templates/versions/{version.id}")
    if existing is None:
        client.post(Template, "/api/v2/templates", {"name": name, "version_id": version.id})
        click.echo(f"Created template {name} with version {version.name}.")
    elif activate:
        client.request("PATCH", f"/api/v2/templates/{existing.id}/versions", json={"id": version.id})
        click.echo(f"Version {version.name} is now the active version of {name}.")


def _say_who_builds(client: SlipwayClient, tags: dict[str, str]) -> None:
    """Before anything is queued: how many online daemons would take the import and the builds, and a warning when
    none would (the import would wait, pending, until one starts)."""
    query = urlencode({"tags": json.dumps(tags)})
    serving = client.get_list(ProvisionerDaemon, f"/api/v2/provisionerdaemons?{query}")
    online = sum(1 for daemon in serving if daemon.status != "offline")
    shown = " ".join(f"{key}={value}" for key, value in sorted(tags.items()))
    if online:
        click.echo(f"Provisioner daemons online for {shown or 'untagged jobs'}: {online}.")
        return
    start = "slipway provisionerd start" + "".join(f" --tag {pair}" for pair in shown.split())
    click.echo(
        f"warning: no online provisioner daemon takes {shown or 'untagged jobs'}: the import will wait, pending, "
        f"until one starts ({start}).",
        err=True,
    )


def _template_named(client: SlipwayClient, name: str) -> Template | None:
    found = client.get_list(Template, f"/api/v2/templates?name={name}")
    return found[0] if found else None


@templates.command("list")
@list_options(
    available=["name", "display_name", "active_version_id", "created_at", "id"],
    default=["name", "display_name", "active_version_id", "created_at"],
)
def list_templates(listing: ListOutput) -> None:
    """List templates."""
    answer = authenticated_client().get("/api/v2/templates")
    listing.show(answer, lambda: [item.to_json() for item in decoded_list(Template, answer, "GET /api/v2/templates")])


@templates.group("versions")
def versions() -> None:
    """Versions of a template."""


@versions.command("list")
@click.argument("name")
@list_options(
    available=["name", "status", "active", "archived", "created_at", "created_by", "message", "id", "error"],
    default=["name", "status", "active", "archived", "created_at", "created_by", "message"],
)
def list_versions(name: str, listing: ListOutput) -> None:
    """List the versions of template NAME, newest first."""
    client = authenticated_client()
    template = _template_named(client, name)
    if template is None:
        raise click.ClickException(f"No template named {name!r} (see `slipway templates list`).")
    path = f"/api/v2/templates/{template.id}/versions"
    answer = client.get(path)

    def row(version: TemplateVersion) -> dict[str, object]:
        active = "yes" if version.id == template.active_version_id else ""
        archived = "yes" if version.archived else ""
        author = version.created_by.username if version.created_by else ""
        return {"name": version.name, "status": version.job.status, "active": active, "archived": archived,
                "created_at": version.created_at, "created_by": author, "message": version.message,
                "id": version.id, "error": version.job.error}  # fmt: skip

    listing.show(answer, lambda: [row(version) for version in decoded_list(TemplateVersion, answer, f"GET {path}")])


def _existing_template(client: SlipwayClient, name: str) -> Template:
    template = _template_named(client, name)
    if template is None:
        raise click.ClickException(f"No template named {name!r} (see `slipway templates list`).")
    return template


def _version_named(client: SlipwayClient, template: Template, name: str) -> TemplateVersion:
    return client.get_one(TemplateVersion, f"/api/v2/templates/{template.id}/versions/{quote(name, safe='')}")


@versions.command("archive")
@click.argument("template_name")
@click.argument("version_names", nargs=-1, required=True)
def archive_versions(template_name: str, version_names: tuple[str, ...]) -> None:
    """Archive versions VERSION_NAMES of template TEMPLATE_NAME: they build no new workspace and stop counting
    against your template storage (refused for the active version and for one a workspace is on)."""
    _set_archived(template_name, version_names, "archive")


@versions.command("unarchive")
@click.argument("template_name")
@click.argument("version_names", nargs=-1, required=True)
def unarchive_versions(template_name: str, version_names: tuple[str, ...]) -> None:
    """Make archived versions VERSION_NAMES of template TEMPLATE_NAME usable again."""
    _set_archived(template_name, version_names, "unarchive")


def _set_archived(template_name: str, version_names: tuple[str, ...], action: str) -> None:
    client = authenticated_client()
    template = _existing_template(client, template_name)
    for version_name in version_names:
        version = _version_named(client, template, version_name)
        client.request("POST", f"/api/v2/templateversions/{version.id}/{action}")
        click.echo(f"Version {version.name} of {template.name}: {action}d.")


@templates.command("archive")
@click.argument("names", nargs=-1, required=True)
@click.option("--all", "everything", is_flag=True, help="Archive every unused version, not only the failed ones.")
def archive_template_versions(names: tuple[str, ...], everything: bool) -> None:
    """Archive the failed versions of templates NAMES (with --all: every version neither active nor in use)."""
    client = authenticated_client()
    for name in names:
        template = _existing_template(client, name)
        answer = client.request("POST", f"/api/v2/templates/{template.id}/versions/archive", json={"all": everything})
        archived = answer.get("archived_ids", []) if isinstance(answer, dict) else []
        count = len(archived) if isinstance(archived, list) else 0
        kind = "unused" if everything else "failed"
        click.echo(f"Archived {count} {kind} version{'' if count == 1 else 's'} of {template.name}.")


def _milliseconds(text: str | None) -> int | None:
    """A duration flag: ``8h``, ``30m``, ``0`` (off); None when the flag was not given."""
    if text is None:
        return None
    return 0 if text.strip() in ("0", "off") else int(parse_duration(text).total_seconds() * 1000)


@templates.command("edit")
@click.argument("name")
@click.option("--display-name", help="The name people see.")
@click.option("--description", help="What the template is for.")
@click.option("--icon", help="An https:// URL or a /path on this server.")
@click.option(
    "--deprecated", "deprecation_message", help='Deprecate it with this message (no new workspaces); "" undeprecates.'
)
@click.option("--default-ttl", help="Autostop after each start unless the workspace sets its own (8h; 0 = none).")
@click.option("--activity-bump", help="How far open connections push the autostop (1h; 0 = not at all).")
@click.option("--allow-user-autostart/--forbid-user-autostart", default=None, help="May people set autostart?")
@click.option("--allow-user-autostop/--forbid-user-autostop", default=None, help="May people set their own TTL?")
@click.option("--autostop-requirement-days", help="Days a stop is forced in the owner's quiet hours (mon,fri; `none`).")
@click.option("--autostop-requirement-weeks", type=int, help="Every how many weeks the requirement applies.")
@click.option("--failure-ttl", help="Stop a workspace whose start failed after this long (1h; 0 = never).")
@click.option("--dormancy-threshold", help="Unused this long, a workspace goes dormant (30d; 0 = never).")
@click.option("--dormancy-auto-deletion", help="Dormant this long, a workspace is deleted (14d; 0 = never).")
@click.option(
    "--require-active-version/--allow-old-versions", default=None, help="Must members start the active version?"
)
def edit(name: str, **flags: str | int | bool | None) -> None:
    """Change template NAME's metadata, schedule and policy (only the flags given change)."""
    client = authenticated_client()
    template = _template_named(client, name)
    if template is None:
        raise click.ClickException(f"No template named {name!r} (see `slipway templates list`).")
    body: dict[str, JSON] = {}
    texts = ("display_name", "description", "icon", "deprecation_message")
    for flag, field in ((text, text) for text in texts):
        if flags[flag] is not None:
            body[field] = str(flags[flag])
    durations = {
        "default_ttl": "default_ttl_ms", "activity_bump": "activity_bump_ms", "failure_ttl": "failure_ttl_ms",
        "dormancy_threshold": "time_til_dormant_ms", "dormancy_auto_deletion": "time_til_dormant_autodelete_ms",
    }  # fmt: skip
    for flag, field in durations.items():
        value = flags[flag]
        milliseconds = _milliseconds(value if isinstance(value, str) else None)
        if milliseconds is not None:
            body[field] = milliseconds
    for flag in ("allow_user_autostart", "allow_user_autostop", "require_active_version"):
        if flags[flag] is not None:
            body[flag] = bool(flags[flag])
    days, weeks = flags["autostop_requirement_days"], flags["autostop_requirement_weeks"]
    if days is not None or weeks is not None:
        names = [] if days in (None, "none") else [_day_name(day) for day in str(days).split(",") if day.strip()]
        body["autostop_requirement"] = {"days_of_week": [*names], "weeks": int(weeks or 1)}
    if not body:
        raise click.UsageError("Give at least one setting to change (see --help).")
    answer = client.request("PATCH", f"/api/v2/templates/{template.id}", json=body)
    changed = decoded(Template, answer, "PATCH /api/v2/templates")
    click.echo(f"Template {changed.name} updated: {', '.join(sorted(body))}.")


_DAYS = {"mon": "monday", "tue": "tuesday", "wed": "wednesday", "thu": "thursday", "fri": "friday",
         "sat": "saturday", "sun": "sunday"}  # fmt: skip


def _day_name(text: str) -> str:
    key = text.strip().lower()
    return _DAYS.get(key[:3], key)


def _validate() -> click.Command:
    from cli.template_validate import validate

    return validate


templates.add_command(_validate())


@templates.command("delete")
@click.argument("names", nargs=-1, required=True)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete(names: tuple[str, ...], yes: bool) -> None:
    """Delete templates NAMES (refused while workspaces use one: delete them first)."""
    client = authenticated_client()
    found = []
    for name in names:
        template = _template_named(client, name)
        if template is None:
            raise click.ClickException(f"No template named {name!r} (see `slipway templates list`).")
        found.append(template)
    if not yes:
        click.confirm(f"Delete {', '.join(names)}? Their versions are archived; this cannot be undone", abort=True)
    for template in found:
        client.request("DELETE", f"/api/v2/templates/{template.id}")
        click.echo(f"Deleted template {template.name}.")


@templates.command("pull")
@click.argument("name")
@click.argument("destination", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--version", "version_name", default="", help="The version to pull (default: the active one).")
@click.option("--tar", "as_tar", is_flag=True, help="Write the files as a tar archive to standard output.")
@click.option("--zip", "as_zip", is_flag=True, help="Write the files as a zip archive to standard output.")
def pull(name: str, destination: Path | None, version_name: str, as_tar: bool, as_zip: bool) -> None:
    """Download the source of template NAME into DESTINATION (default ./NAME, which must be empty or new), or as an
    archive with --tar or --zip."""
    from workers.archive import ArchiveError, archive_as, extract_archive

    if as_tar and as_zip:
        raise click.UsageError("choose one of --tar and --zip")

    client = authenticated_client()
    template = _existing_template(client, name)
    if version_name:
        version = _version_named(client, template, version_name)
    elif template.active_version_id:
        version = client.get_one(TemplateVersion, f"/api/v2/templateversions/{template.active_version_id}")
    else:
        raise click.ClickException(f"Template {name} has no active version: name one with --version.")
    archive = client.download(f"/api/v2/files/{version.job.file_id}")
    if as_tar or as_zip:
        try:
            sys.stdout.buffer.write(archive_as(archive, "zip" if as_zip else "tar"))
        except ArchiveError as exc:
            raise click.ClickException(f"cannot repack version {version.name}: {exc}") from exc
        sys.stdout.buffer.flush()
        return
    target = destination or Path(name)
    if target.exists() and any(target.iterdir()):
        raise click.ClickException(f"{target} is not empty: pull into a new or empty directory.")
    try:
        extract_archive(archive, target)
    except ArchiveError as exc:
        raise click.ClickException(f"cannot unpack version {version.name}: {exc}") from exc
    click.echo(f"Pulled version {version.name} of {name} into {target}.")


@templates.group("permissions")
def permissions() -> None:
    """Who may use or administer a template (its admins, template admins and owners change it)."""


@permissions.command("list")
@click.argument("name")
@list_options(available=["kind", "name", "role", "members", "id"], default=["kind", "name", "role", "members"])
def permissions_list(name: str, listing: ListOutput) -> None:
    """List template NAME's access list: people and groups, each with use or admin."""
    client = authenticated_client()
    path = f"/api/v2/templates/{_existing_template(client, name).id}/acl"
    answer = client.get(path)

    def rows() -> list[dict[str, object]]:
        acl = decoded(TemplateAcl, answer, f"GET {path}")
        people: list[dict[str, object]] = [
            {"kind": "user", "name": u.username, "role": u.role, "members": "", "id": u.id} for u in acl.users
        ]
        groups: list[dict[str, object]] = [
            {"kind": "group", "name": g.name, "role": g.role, "members": g.total_member_count, "id": g.id}
            for g in acl.group
        ]
        return groups + people

    listing.show(answer, rows)


SUBJECT_HELP = "USERNAME=ROLE (use or admin); repeat for more."


@permissions.command("set")
@click.argument("name")
@click.option("--user", "users", multiple=True, metavar="USERNAME=ROLE", help=SUBJECT_HELP)
@click.option("--group", "groups", multiple=True, metavar="GROUP=ROLE", help="GROUP=ROLE (use or admin; Everyone too).")
def permissions_set(name: str, users: tuple[str, ...], groups: tuple[str, ...]) -> None:
    """Grant people and groups use or admin of template NAME (replacing what they had)."""
    user_roles = key_value_pairs(users, "--user values")
    group_roles = key_value_pairs(groups, "--group values")
    if not user_roles and not group_roles:
        raise click.UsageError("Give at least one --user USERNAME=ROLE or --group GROUP=ROLE.")
    _change_acl(name, user_roles, group_roles)
    click.echo(f"Updated who may use {name}.")


@permissions.command("remove")
@click.argument("name")
@click.option("--user", "users", multiple=True, metavar="USERNAME", help="A person to take off the list.")
@click.option("--group", "groups", multiple=True, metavar="GROUP", help="A group to take off the list.")
def permissions_remove(name: str, users: tuple[str, ...], groups: tuple[str, ...]) -> None:
    """Take people and groups off template NAME's access list."""
    if not users and not groups:
        raise click.UsageError("Give at least one --user or --group.")
    _change_acl(name, dict.fromkeys(users, ""), dict.fromkeys(groups, ""))
    click.echo(f"Updated who may use {name}.")


def _change_acl(name: str, user_roles: dict[str, str], group_roles: dict[str, str]) -> None:
    """Names become ids through ``/acl/available`` (open to whoever administers the template, unlike the users
    list), then one PATCH."""
    client = authenticated_client()
    template = _existing_template(client, name)
    base = f"/api/v2/templates/{template.id}/acl"
    user_perms: dict[str, JSON] = {}
    for username, role in user_roles.items():
        found = client.get_one(AclAvailable, f"{base}/available?{urlencode({'q': username, 'limit': 1000})}").users
        match = [user for user in found if user.username.lower() == username.lower()]
        if not match:
            raise click.ClickException(f"No person named {username!r} in the template's organisation.")
        user_perms[match[0].id] = role
    group_perms: dict[str, JSON] = {}
    for group_name, role in group_roles.items():
        found_groups = client.get_one(AclAvailable, f"{base}/available?{urlencode({'q': group_name, 'limit': 1000})}")
        named = [group for group in found_groups.groups if group.name.lower() == group_name.lower()]
        if not named:
            raise click.ClickException(f"No group named {group_name!r} in the template's organisation.")
        group_perms[named[0].id] = role
    client.request("PATCH", base, json={"user_perms": user_perms, "group_perms": group_perms})
