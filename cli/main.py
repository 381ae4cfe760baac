"""The `slipway` command: the server, and a client for everything the API offers.

Each command's module is imported only when that command runs: `slipway ssh` (an SSH ProxyCommand), a
workspace's `GIT_ASKPASS` or `slipway --version` must not pay for the server or every other command.
"""

from __future__ import annotations

import importlib

import click
from click.shell_completion import CompletionItem

from cli.errors import unexpected

# Sections of `slipway --help`, each command's name -> "module:attribute", in the order help lists them.
SECTIONS: dict[str, dict[str, str]] = {
    "Workspaces": {
        "create": "cli.workspaces:create",
        "list": "cli.workspaces:list_workspaces",
        "show": "cli.workspaces:show",
        "start": "cli.lifecycle:start",
        "stop": "cli.workspaces:stop",
        "restart": "cli.lifecycle:restart",
        "update": "cli.lifecycle:update",
        "delete": "cli.workspaces:delete",
        "logs": "cli.workspaces:logs",
        "schedule": "cli.lifecycle:schedule",
        "sharing": "cli.sharing:sharing",
    },
    "Connect": {
        "ssh": "cli.ssh:ssh",
        "config-ssh": "cli.ssh:config_ssh",
        "port-forward": "cli.port_forward:port_forward",
        "external-auth": "cli.git:external_auth",
    },
    "Templates": {
        "templates": "cli.templates:templates",
    },
    "Account": {
        "login": "cli.accounts:login",
        "logout": "cli.accounts:logout",
        "whoami": "cli.accounts:whoami",
        "tokens": "cli.accounts:tokens",
        "secrets": "cli.secrets:secrets",
        "completion": "cli.completion:completion",
    },
    "Admin": {
        "users": "cli.accounts:users",
        "organizations": "cli.organizations:organizations",
        "groups": "cli.groups:groups",
        "provisioner": "cli.provisioners:provisioner",
        "audit": "cli.audit:audit",
        "prebuilds": "cli.prebuilds:prebuilds",
    },
    "Run Slipway": {
        "server": "cli.server:server",
        "provisionerd": "cli.provisionerd:provisionerd",
        "agent-bundle": "cli.agent_bundle:agent_bundle",
    },
    "Called by other programs": {
        "agent": "cli.agent:agent",
        "gitaskpass": "cli.git:gitaskpass",
        "gitssh": "cli.git:gitssh",
    },
}
COMMANDS = {name: target for commands in SECTIONS.values() for name, target in commands.items()}
# Long-running processes whose unexpected errors keep their traceback (their logs are read by operators).
DAEMONS = frozenset({"server", "provisionerd", "agent"})


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

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        for section, commands in SECTIONS.items():
            rows = []
            for name in commands:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
            if rows:
                with formatter.section(section):
                    formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Command names without importing every command (a Tab press must be quick); options as usual."""
        if incomplete.startswith("-"):
            return super().shell_complete(ctx, incomplete)
        return [CompletionItem(name) for name in COMMANDS if name.startswith(incomplete)]

    def invoke(self, ctx: click.Context) -> object:
        """Any error a command did not phrase itself becomes one line and a hint, never a traceback."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, click.ClickException):
            raise
        except Exception as exc:
            if ctx.invoked_subcommand in DAEMONS:
                raise
            phrased = unexpected(exc)
            if phrased is None:
                raise
            raise phrased from exc


def _print_version(ctx: click.Context, _: click.Parameter, wanted: bool) -> None:
    if not wanted or ctx.resilient_parsing:
        return
    # Here, not at the top: importlib.metadata costs every command ~30 ms of start-up, and only this one needs it.
    from importlib.metadata import PackageNotFoundError, version

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
