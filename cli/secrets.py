"""`slipway secrets`: a person's secrets, which their workspaces' builds get for the templates' data "coder_secret"."""

from __future__ import annotations

import sys
from urllib.parse import quote

import click

from cli.client import authenticated_client, decoded_list
from cli.output import ListOutput, list_options
from protocol.codec import JSON
from protocol.publicapi import UserSecret

SECRETS = "/api/v2/users/me/secrets"


@click.group()
def secrets() -> None:
    """Manage your secrets: values templates ask for with data "coder_secret", as a variable or a file."""


@secrets.command("list")
@list_options(
    available=["name", "env_name", "file_path", "description", "created_at", "updated_at", "id"],
    default=["name", "env_name", "file_path", "description", "updated_at"],
)
def secrets_list(listing: ListOutput) -> None:
    """List your secrets (never their values)."""
    answer = authenticated_client().get(SECRETS)
    listing.show(answer, lambda: [secret.to_json() for secret in decoded_list(UserSecret, answer, f"GET {SECRETS}")])


def _read_value(value: str | None, value_file: str | None) -> str:
    if value is not None and value_file is not None:
        raise click.UsageError("Give --value or --value-file, not both.")
    if value is not None:
        return value
    if value_file == "-":
        return sys.stdin.read().removesuffix("\n")
    if value_file is not None:
        try:
            with open(value_file, encoding="utf-8") as handle:
                return handle.read().removesuffix("\n")
        except OSError as exc:
            raise click.BadParameter(f"cannot read {value_file}: {exc.strerror}", param_hint="--value-file") from exc
    if not sys.stdin.isatty():
        raise click.UsageError("Give the value with --value, or --value-file (- reads it from standard input).")
    entered: str = click.prompt("Value", hide_input=True)
    return entered


@secrets.command("create")
@click.argument("name")
@click.option("--value", help="The value (visible in your shell's history: prefer --value-file or the prompt).")
@click.option("--value-file", metavar="PATH", help="Read the value from a file; - reads standard input.")
@click.option("--env", "env_name", default="", help="The environment variable it provides, e.g. GITHUB_TOKEN.")
@click.option("--file", "file_path", default="", help="The file it provides, starting with / or ~/.")
@click.option("--description", default="", help="What it is for.")
def secrets_create(
    name: str, value: str | None, value_file: str | None, env_name: str, file_path: str, description: str
) -> None:
    """Store secret NAME; without --value or --value-file you are asked for it (hidden)."""
    body: dict[str, JSON] = {
        "name": name,
        "value": _read_value(value, value_file),
        "env_name": env_name,
        "file_path": file_path,
        "description": description,
    }
    authenticated_client().request("POST", SECRETS, json=body)
    click.echo(f"Created secret {name}.")


@secrets.command("delete")
@click.argument("name")
def secrets_delete(name: str) -> None:
    """Delete your secret NAME."""
    authenticated_client().request("DELETE", f"{SECRETS}/{quote(name, safe='')}")
    click.echo(f"Deleted secret {name}.")
