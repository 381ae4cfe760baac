"""The CLI's errors: one line saying what went wrong and, when there is something to do about it, one hint line.

Kept free of heavy imports: `slipway --version` and `slipway gitaskpass` import it on every run.
"""

from __future__ import annotations

import os
from typing import IO, Any

import click

DEBUG_VARIABLE = "SLIPWAY_DEBUG"  # set to any value: unexpected errors show their traceback


class CliError(click.ClickException):
    """``Error: <message>`` and, if given, ``Hint: <hint>`` on stderr; exit status 1."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def show(self, file: IO[Any] | None = None) -> None:
        super().show(file)
        if self.hint:
            click.echo(f"Hint: {self.hint}", file=file, err=file is None)


def status_hint(status: int) -> str:
    """What to try after the server answered ``status``."""
    if status == 401:
        return "sign in again with `slipway login <url>`."
    if status == 403:
        return "your roles do not allow this; `slipway whoami` shows them, an owner can grant more."
    if status == 404:
        return "check the name or id (the list commands show them); it may have been deleted."
    if status == 409:
        return "something changed meanwhile; look at its current state and try again."
    if status in (400, 422):
        return "see `--help` for the accepted values."
    if status >= 500:
        return "the server failed; its log says why. Try again shortly."
    return ""


def unexpected(exc: Exception) -> CliError | None:
    """An exception no command turned into a CliError, as one: connection failures and file errors get their
    own words; None for anything else when SLIPWAY_DEBUG asks for the traceback."""
    name = type(exc).__module__.split(".")[0]
    if name in ("httpx", "httpcore"):  # not imported here: only a command that used it can have raised it
        return CliError(
            f"lost the connection to the server: {exc or type(exc).__name__}",
            "check your network and that the server is up, then run the command again.",
        )
    if os.environ.get(DEBUG_VARIABLE):
        return None
    if isinstance(exc, OSError):
        return CliError(str(exc), f"set {DEBUG_VARIABLE}=1 to see where it happened.")
    return CliError(
        f"unexpected {type(exc).__name__}: {exc}",
        f"this is a bug in slipway; run again with {DEBUG_VARIABLE}=1 to see where, and report it.",
    )
