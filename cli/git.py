"""Inside a workspace: git's helpers and tokens for scripts, from the owner's linked Git providers.

The work is in agent/git.py (the agent's wrappers run it without this CLI); these commands make it reachable as
``slipway gitaskpass``, ``slipway gitssh`` and ``slipway external-auth access-token`` like Coder's.
"""

from __future__ import annotations

import sys

import click

from agent import git


def _run(args: list[str]) -> None:
    sys.exit(git.main(args))


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("prompt")
def gitaskpass(prompt: str) -> None:
    """GIT_ASKPASS: answer git's username or password prompt with your linked provider's token."""
    _run(["askpass", prompt])


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def gitssh(arguments: tuple[str, ...]) -> None:
    """GIT_SSH_COMMAND: ssh with your Git SSH key (Account → Git SSH key)."""
    _run(["ssh", *arguments])


@click.group("external-auth")
def external_auth() -> None:
    """Tokens of your linked Git providers, inside a workspace."""


@external_auth.command("access-token")
@click.argument("provider_id")
@click.option("--extra", metavar="FIELD", help="Print this field of the token response instead (e.g. scope).")
def access_token(provider_id: str, extra: str | None) -> None:
    """Print your access token for PROVIDER_ID (exit 1, with the link URL, when you have not linked it)."""
    _run(["external-auth", "access-token", provider_id, *(["--extra", extra] if extra else [])])
