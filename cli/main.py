"""The `slipway` command: the server, and a client for everything the API offers."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from cli import accounts, port_forward, provisionerd, provisioners, ssh, templates, workspaces
from cli.agent import agent
from cli.agent_bundle import agent_bundle
from cli.server import server


def _version() -> str:
    try:
        return version("slipway")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0.0.0+unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(_version(), "--version", "-V", prog_name="slipway")
def cli() -> None:
    """Slipway: self-hosted cloud development workspaces.

    Client commands use the login saved by `slipway login`, or SLIPWAY_URL and SLIPWAY_SESSION_TOKEN.
    """


cli.add_command(server)
cli.add_command(accounts.login)
cli.add_command(accounts.logout)
cli.add_command(accounts.whoami)
cli.add_command(accounts.users)
cli.add_command(accounts.tokens)
cli.add_command(templates.templates)
cli.add_command(provisioners.provisioner)
cli.add_command(provisionerd.provisionerd)
cli.add_command(agent)
cli.add_command(agent_bundle)
cli.add_command(ssh.ssh)
cli.add_command(ssh.config_ssh)
cli.add_command(port_forward.port_forward)
for command in (
    workspaces.create,
    workspaces.start,
    workspaces.stop,
    workspaces.delete,
    workspaces.show,
    workspaces.logs,
):
    cli.add_command(command)
cli.add_command(workspaces.list_workspaces, name="list")


def main() -> None:
    cli(prog_name="slipway")
