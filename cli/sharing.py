"""`slipway sharing add|remove|list`: share a workspace of yours with people or groups (Coder's `coder sharing`)."""

from __future__ import annotations

from collections.abc import Mapping

import click

from cli.client import authenticated_client
from cli.output import ListOutput, list_options
from cli.workspaces import find_workspace
from protocol.codec import JSON

ROLES = ("use", "admin")


@click.group()
def sharing() -> None:
    """Share a workspace: `use` lets people connect (SSH, terminal, apps, port-forward), start and stop it;
    `admin` also lets them change its parameters and schedule, and delete it."""


def _subjects(values: tuple[str, ...], option: str, *, with_role: bool) -> dict[str, str]:
    """NAME[:ROLE] values (ROLE: use, the default, or admin) as {name: role}."""
    chosen: dict[str, str] = {}
    for value in values:
        name, _, role = value.partition(":")
        role = role or "use"
        if not name or (with_role and role not in ROLES) or (not with_role and ":" in value):
            expected = "NAME or NAME:use or NAME:admin" if with_role else "NAME"
            raise click.BadParameter(f"expected {expected}, got {value!r}", param_hint=option)
        chosen[name] = role if with_role else ""
    return chosen


def _patch(workspace_name: str, users: Mapping[str, str], groups: Mapping[str, str]) -> None:
    if not users and not groups:
        raise click.UsageError("Name at least one --user or --group.")
    client = authenticated_client()
    workspace = find_workspace(client, workspace_name)
    body: JSON = {"user_roles": dict(users), "group_roles": dict(groups)}
    client.request("PATCH", f"/api/v2/workspaces/{workspace.id}/acl", json=body)


@sharing.command("add")
@click.argument("workspace")
@click.option(
    "--user", "users", multiple=True, metavar="NAME[:ROLE]", help="A username; ROLE is use (default) or admin."
)
@click.option("--group", "groups", multiple=True, metavar="NAME[:ROLE]", help="A group's name; ROLE as for --user.")
def sharing_add(workspace: str, users: tuple[str, ...], groups: tuple[str, ...]) -> None:
    """Share WORKSPACE (or change a share's role)."""
    chosen_users = _subjects(users, "--user", with_role=True)
    chosen_groups = _subjects(groups, "--group", with_role=True)
    _patch(workspace, chosen_users, chosen_groups)
    shared = [f"{name} ({role})" for name, role in {**chosen_users, **chosen_groups}.items()]
    click.echo(f"Shared {workspace} with {', '.join(shared)}.")


@sharing.command("remove")
@click.argument("workspace")
@click.option("--user", "users", multiple=True, metavar="NAME", help="A username.")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="A group's name.")
def sharing_remove(workspace: str, users: tuple[str, ...], groups: tuple[str, ...]) -> None:
    """Stop sharing WORKSPACE with these people or groups: their open sessions into it close at once."""
    chosen_users = _subjects(users, "--user", with_role=False)
    chosen_groups = _subjects(groups, "--group", with_role=False)
    _patch(workspace, chosen_users, chosen_groups)
    click.echo(f"{workspace} is no longer shared with {', '.join([*chosen_users, *chosen_groups])}.")


@sharing.command("list")
@click.argument("workspace")
@list_options(available=["name", "kind", "role", "id"], default=["name", "kind", "role"])
def sharing_list(workspace: str, listing: ListOutput) -> None:
    """Who WORKSPACE is shared with."""
    client = authenticated_client()
    answer = client.get(f"/api/v2/workspaces/{find_workspace(client, workspace).id}/acl")

    def rows() -> list[dict[str, object]]:
        found = answer if isinstance(answer, dict) else {}
        users, groups = found.get("users"), found.get("group")
        listed = [
            {"name": entry.get("username", ""), "kind": "user", "role": entry.get("role", ""), "id": entry.get("id")}
            for entry in (users if isinstance(users, list) else [])
            if isinstance(entry, dict)
        ]
        listed += [
            {"name": entry.get("name", ""), "kind": "group", "role": entry.get("role", ""), "id": entry.get("id")}
            for entry in (groups if isinstance(groups, list) else [])
            if isinstance(entry, dict)
        ]
        return listed

    listing.show(answer, rows)
