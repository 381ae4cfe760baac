"""`slipway organizations list|create|show|edit|delete|set` and `slipway organizations members list|add|remove|
edit-roles` (owners change organisations; owners, user admins and an organisation's admins manage its members)."""

from __future__ import annotations

from urllib.parse import quote

import click

from cli.client import authenticated_client, decoded, decoded_list
from cli.config import organization_option, save_organization, saved_organization
from cli.output import ListOutput, list_options
from protocol.codec import JSON
from protocol.publicapi import Organization, OrganizationMember, OrganizationMemberWithUserData

ORG_OPTION = organization_option()


@click.group()
def organizations() -> None:
    """Organisations: each has its own templates, groups and provisioners; people belong to one or more."""


def _path(organization: str, *more: str) -> str:
    return "/".join(["/api/v2/organizations", quote(organization), *(quote(part) for part in more)])


@organizations.command("list")
@list_options(
    available=["name", "display_name", "default", "current", "description", "icon", "id"],
    default=["name", "display_name", "default", "current"],
)
def list_organizations(listing: ListOutput) -> None:
    """List your organisations (every one, for owners, auditors and user admins)."""
    answer = authenticated_client().get("/api/v2/organizations")
    current = saved_organization()

    def rows() -> list[dict[str, object]]:
        return [
            {
                "name": org.name,
                "display_name": org.display_name,
                "default": "yes" if org.is_default else "",
                "current": "*" if current in (org.name, org.id) or (current == "default" and org.is_default) else "",
                "description": org.description,
                "icon": org.icon,
                "id": org.id,
            }
            for org in decoded_list(Organization, answer, "GET /api/v2/organizations")
        ]

    listing.show(answer, rows)


@organizations.command("show")
@click.argument("name", required=False)
def show(name: str | None) -> None:
    """Show organisation NAME (by default the current one: see `set`)."""
    org = authenticated_client().get_one(Organization, _path(name or saved_organization()))
    click.echo(f"{org.display_name or org.name}  ({org.name}{', the default organisation' if org.is_default else ''})")
    click.echo(f"id: {org.id}")
    if org.description:
        click.echo(f"description: {org.description}")
    if org.icon:
        click.echo(f"icon: {org.icon}")
    click.echo(f"created: {org.created_at}")


@organizations.command("create")
@click.argument("name")
@click.option("--display-name", default="", help="A name for people (default: NAME).")
@click.option("--description", default="", help="What it is for.")
@click.option("--icon", default="", help="An image shown beside it (an http(s) URL or /icon/… path).")
def create(name: str, display_name: str, description: str, icon: str) -> None:
    """Create organisation NAME (owners); you become its first member, as its admin."""
    body: JSON = {"name": name, "display_name": display_name, "description": description, "icon": icon}
    org = authenticated_client().post(Organization, "/api/v2/organizations", body)
    click.echo(f"Created organisation {org.name}. `slipway organizations set {org.name}` makes it the current one.")


@organizations.command("edit")
@click.argument("name")
@click.option("--name", "new_name", help="A new name.")
@click.option("--display-name", help="A new display name.")
@click.option("--description", help="A new description ('' removes it).")
@click.option("--icon", help="A new icon ('' removes it).")
def edit(name: str, new_name: str | None, display_name: str | None, description: str | None, icon: str | None) -> None:
    """Rename organisation NAME or change how it shows (owners)."""
    given = (("name", new_name), ("display_name", display_name), ("description", description), ("icon", icon))
    changes: dict[str, JSON] = {key: value for key, value in given if value is not None}
    if not changes:
        raise click.UsageError("Nothing to change: give --name, --display-name, --description or --icon.")
    authenticated_client().request("PATCH", _path(name), json=changes)
    click.echo(f"Updated organisation {changes.get('name', name)}.")


@organizations.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, yes: bool) -> None:
    """Delete organisation NAME (owners): refused while it holds templates or workspaces."""
    if not yes:
        click.confirm(
            f"Delete organisation {name}? Its groups, provisioner keys and memberships go with it", abort=True
        )
    authenticated_client().request("DELETE", _path(name))
    click.echo(f"Deleted organisation {name}.")


@organizations.command("set")
@click.argument("name")
def set_current(name: str) -> None:
    """Make NAME the organisation that --org means when it is not given (`set default` goes back)."""
    org = authenticated_client().get_one(Organization, _path(name))
    saved = save_organization("default" if org.is_default else org.name)
    click.echo(f"The current organisation is {org.name} (saved in {saved}).")


@organizations.group()
def members() -> None:
    """An organisation's members and their roles there."""


@members.command("list")
@ORG_OPTION
@click.option("--search", "-s", default="", help="Only people whose username or email contains this.")
@list_options(available=["username", "email", "roles", "status", "user_id"], default=["username", "email", "roles"])
def list_members(organization: str, search: str, listing: ListOutput) -> None:
    """List the organisation's members with their organisation roles."""
    path = _path(organization, "members") + (f"?q={quote(search)}" if search else "")
    answer = authenticated_client().get(path)

    def rows() -> list[dict[str, object]]:
        return [
            {
                "username": member.username,
                "email": member.email,
                "roles": ",".join(role.name for role in member.roles),
                "status": member.status,
                "user_id": member.user_id,
            }
            for member in decoded_list(OrganizationMemberWithUserData, answer, f"GET {path}")
        ]

    listing.show(answer, rows)


@members.command("add")
@click.argument("usernames", nargs=-1, required=True)
@ORG_OPTION
def add(usernames: tuple[str, ...], organization: str) -> None:
    """Add USERNAMES to the organisation."""
    client = authenticated_client()
    for username in usernames:
        client.post(OrganizationMember, _path(organization, "members", username), None)
    click.echo(f"Added {', '.join(usernames)} to {organization}.")


@members.command("remove")
@click.argument("usernames", nargs=-1, required=True)
@ORG_OPTION
def remove(usernames: tuple[str, ...], organization: str) -> None:
    """Remove USERNAMES from the organisation (and from its groups)."""
    client = authenticated_client()
    for username in usernames:
        client.request("DELETE", _path(organization, "members", username))
    click.echo(f"Removed {', '.join(usernames)} from {organization}.")


@members.command("edit-roles")
@click.argument("username")
@click.argument("roles", nargs=-1)
@ORG_OPTION
def edit_roles(username: str, roles: tuple[str, ...], organization: str) -> None:
    """Give USERNAME exactly ROLES in the organisation (none: a plain member). The roles: organization-admin,
    organization-template-admin, organization-user-admin, organization-auditor."""
    path = _path(organization, "members", username, "roles")
    member = decoded(OrganizationMember, authenticated_client().put(path, {"roles": list(roles)}), f"PUT {path}")
    names = ", ".join(role.name for role in member.roles) or "no organisation role"
    click.echo(f"{username} now has {names} in {organization}.")
