"""`slipway groups list|create|edit|delete|add|remove` (owners and user admins manage; anyone lists their own)."""

from __future__ import annotations

from urllib.parse import quote

import click

from cli.client import SlipwayClient, authenticated_client, decoded_list
from cli.config import organization_option
from cli.output import ListOutput, list_options
from protocol.codec import JSON
from protocol.publicapi import Group, User

ORG_OPTION = organization_option()


@click.group()
def groups() -> None:
    """Manage groups of people (owners and user admins); templates are granted to groups."""


def _group(client: SlipwayClient, organization: str, name: str) -> Group:
    return client.get_one(Group, f"/api/v2/organizations/{quote(organization)}/groups/{quote(name)}")


def _user_ids(client: SlipwayClient, usernames: tuple[str, ...]) -> list[str]:
    return [client.get_one(User, f"/api/v2/users/{quote(name)}").id for name in usernames]


@groups.command("list")
@ORG_OPTION
@click.option("--search", "-s", default="", help="Only groups whose name contains this.")
@list_options(
    available=["name", "display_name", "members", "source", "quota_allowance", "avatar_url", "id"],
    default=["name", "display_name", "members", "source"],
)
def list_groups(organization: str, search: str, listing: ListOutput) -> None:
    """List the organisation's groups (yours, unless you manage groups or templates)."""
    path = f"/api/v2/organizations/{quote(organization)}/groups" + (f"?q={quote(search)}" if search else "")
    answer = authenticated_client().get(path)

    def rows() -> list[dict[str, object]]:
        return [
            {
                "name": group.name,
                "display_name": group.display_name,
                "members": group.total_member_count,
                "source": group.source,
                "quota_allowance": group.quota_allowance,
                "avatar_url": group.avatar_url,
                "id": group.id,
            }
            for group in decoded_list(Group, answer, f"GET {path}")
        ]

    listing.show(answer, rows)


@groups.command("members")
@click.argument("name")
@ORG_OPTION
@list_options(available=["username", "email", "id"], default=["username", "email"])
def members(name: str, organization: str, listing: ListOutput) -> None:
    """List the members of group NAME."""
    client = authenticated_client()
    group_id = _group(client, organization, name).id
    people: list[JSON] = []
    offset, total = 0, 1
    while offset < total:  # a page at a time: a group may hold thousands
        page = client.get_one(Group, f"/api/v2/groups/{group_id}?limit=1000&offset={offset}")
        people += [member.to_json() for member in page.members]
        total, offset = page.total_member_count, offset + 1000
    listing.show(people, lambda: [dict(person) for person in people if isinstance(person, dict)])


@groups.command("create")
@click.argument("name")
@ORG_OPTION
@click.option("--display-name", default="", help="A name for people (default: NAME).")
@click.option("--avatar-url", default="", help="An image shown beside the group.")
@click.option("--quota-allowance", type=click.IntRange(min=0), default=0, help="Quota credits each member gets.")
def create(name: str, organization: str, display_name: str, avatar_url: str, quota_allowance: int) -> None:
    """Create group NAME."""
    body: JSON = {
        "name": name,
        "display_name": display_name,
        "avatar_url": avatar_url,
        "quota_allowance": quota_allowance,
    }
    group = authenticated_client().post(Group, f"/api/v2/organizations/{quote(organization)}/groups", body)
    click.echo(f"Created group {group.name}.")


@groups.command("edit")
@click.argument("name")
@ORG_OPTION
@click.option("--name", "new_name", help="A new name.")
@click.option("--display-name", help="A new display name.")
@click.option("--avatar-url", help="A new avatar URL ('' removes it).")
@click.option("--quota-allowance", type=click.IntRange(min=0), help="Quota credits each member gets.")
def edit(
    name: str,
    organization: str,
    new_name: str | None,
    display_name: str | None,
    avatar_url: str | None,
    quota_allowance: int | None,
) -> None:
    """Rename group NAME or change how it shows."""
    changes: dict[str, JSON] = {
        key: value
        for key, value in (
            ("name", new_name),
            ("display_name", display_name),
            ("avatar_url", avatar_url),
            ("quota_allowance", quota_allowance),
        )
        if value is not None
    }
    if not changes:
        raise click.UsageError("Nothing to change: give --name, --display-name, --avatar-url or --quota-allowance.")
    client = authenticated_client()
    group = _group(client, organization, name)
    client.request("PATCH", f"/api/v2/groups/{group.id}", json=changes)
    click.echo(f"Updated group {changes.get('name', name)}.")


@groups.command("delete")
@click.argument("name")
@ORG_OPTION
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, organization: str, yes: bool) -> None:
    """Delete group NAME (its members keep their accounts; what it granted goes)."""
    client = authenticated_client()
    group = _group(client, organization, name)
    if not yes:
        click.confirm(f"Delete group {name}? Templates granted to it are no longer granted through it", abort=True)
    client.request("DELETE", f"/api/v2/groups/{group.id}")
    click.echo(f"Deleted group {name}.")


@groups.command("add")
@click.argument("name")
@click.argument("usernames", nargs=-1, required=True)
@ORG_OPTION
def add(name: str, usernames: tuple[str, ...], organization: str) -> None:
    """Add USERNAMES to group NAME."""
    _change_members(name, organization, "add_users", usernames)
    click.echo(f"Added {', '.join(usernames)} to {name}.")


@groups.command("remove")
@click.argument("name")
@click.argument("usernames", nargs=-1, required=True)
@ORG_OPTION
def remove(name: str, usernames: tuple[str, ...], organization: str) -> None:
    """Remove USERNAMES from group NAME."""
    _change_members(name, organization, "remove_users", usernames)
    click.echo(f"Removed {', '.join(usernames)} from {name}.")


def _change_members(name: str, organization: str, key: str, usernames: tuple[str, ...]) -> None:
    client = authenticated_client()
    group = _group(client, organization, name)
    ids: list[JSON] = list(_user_ids(client, usernames))
    client.request("PATCH", f"/api/v2/groups/{group.id}", json={key: ids})
