"""`slipway completion bash|zsh|fish`: a script that completes commands, options and choices.

The script asks `slipway` itself on each Tab (click's completion protocol, through ``_SLIPWAY_COMPLETE``), so it
follows the command tree as it is and never goes stale when commands change.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

PROGRAM = "slipway"
COMPLETE_VARIABLE = "_SLIPWAY_COMPLETE"  # the variable click's main reads for prog_name "slipway"

INSTALL = {
    "bash": 'eval "$(slipway completion bash)"  # in ~/.bashrc (bash 4.4 or newer)',
    "zsh": 'eval "$(slipway completion zsh)"  # in ~/.zshrc, after compinit',
    "fish": "slipway completion fish > ~/.config/fish/completions/slipway.fish",
}


@click.command(epilog="Install: " + "; ".join(INSTALL.values()))
@click.argument("shell", type=click.Choice(sorted(INSTALL)))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL."""
    from cli.main import cli

    completer = get_completion_class(shell)
    if completer is None:  # every choice is a shell click knows
        raise click.ClickException(f"no completion for {shell}")
    click.echo(completer(cli, {}, PROGRAM, COMPLETE_VARIABLE).source())
