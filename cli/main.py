"""The `slipway` command: the server, and a client for everything the API offers.

Each command's module is imported only when that command runs: `slipway ssh` (an SSH ProxyCommand), a
workspace's `GIT_ASKPASS` or `slipway --version` must not pay for the server or every other command.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

import click

# name -> "module:attribute", in the order `slipway --help` lists them.
COMMANDS = {
    "server": "cli.server:server",
    "login": "cli.accounts:login",
    "logout": "cli.accounts:logout",
    "whoami": "cli.accounts:whoami",
    "users": "cli.accounts:users",
    "tokens": "cli.accounts:tokens",
    "templates": "cli.templates:templates",
    "create": "cli.workspaces:create",
    "start": "cli.lifecycle:start",
    "stop": "cli.workspaces:stop",
    "restart": "cli.lifecycle:restart",
    "update": "cli.lifecycle:update",
    "delete": "cli.workspaces:delete",
    "list": "cli.workspaces:list_workspaces",
    "show": "cli.workspaces:show",
    "logs": "cli.workspaces:logs",
    "schedule": "cli.lifecycle:schedule",
    "ssh": "cli.ssh:ssh",
    "config-ssh": "cli.ssh:config_ssh",
    "port-forward": "cli.port_forward:port_forward",
    "provisioner": "cli.provisioners:provisioner",
    "provisionerd": "cli.provisionerd:provisionerd",
    "external-auth": "cli.git:external_auth",
    "gitaskpass": "cli.git:gitaskpass",
    "gitssh": "cli.git:gitssh",
    "agent": "cli.agent:agent",
    "agent-bundle": "cli.agent_bundle:agent_bundle",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when they are asked for (and all of them for `--help`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


def _print_version(ctx: click.Context, _: click.Parameter, wanted: bool) -> None:
    if not wanted or ctx.resilient_parsing:
        return
    try:
        number = version("slipway")
    except PackageNotFoundError:  # running from a checkout that was never installed
        number = "0.0.0+unknown"
    click.echo(f"slipway, version {number}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option(
    "--version",
    "-V",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """Slipway: self-hosted cloud development workspaces.

    Client commands use the login saved by `slipway login`, or SLIPWAY_URL and SLIPWAY_SESSION_TOKEN.
    """


def main() -> None:
    cli(prog_name="slipway")
