"""What a deployment file may name: the click command a `slipway …` command line runs (its flags checked), and the
variables that command and the server read. Shared by the systemd units' and the Helm charts' tests."""

from __future__ import annotations

import click

from cli.main import cli as slipway
from cli.server import SERVER_FLAGS


def command(args: list[str]) -> click.Command:
    """The click command a `slipway …` command line runs (its sub-commands resolved), checking its flags exist."""
    assert args[0].endswith("slipway"), args
    current: click.Command = slipway
    words = args[1:]
    while isinstance(current, click.Group) and words and not words[0].startswith("-"):
        found = current.get_command(click.Context(current), words[0])
        assert found is not None, f"no command {words[0]!r} in {args}"
        current, words = found, words[1:]
    options = {opt for parameter in current.params for opt in getattr(parameter, "opts", [])}
    flags = [word for word in words if word.startswith("--")]
    assert set(flags) <= options, f"{args}: unknown flags {set(flags) - options}"
    return current


def known_variables(cmd: click.Command) -> set[str]:
    """The SLIPWAY_* variables `cmd` reads: the server's settings (and their _FILE forms) and its own options'."""
    server = {envvar for _, envvar, _ in SERVER_FLAGS}
    own = {parameter.envvar for parameter in cmd.params if isinstance(getattr(parameter, "envvar", None), str)}
    return server | own | {f"{name}_FILE" for name in server}
