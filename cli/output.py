"""How every list command prints: ``-o table`` (aligned columns, ``-c`` picks them) or ``-o json`` (the API's answer
unchanged, for scripts), as `coder list -o json -c name,status` does. Declared once here so no list differs."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import click

from protocol.codec import JSON

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class ListOutput:
    """What the person asked for: the format, and the table's columns in their order."""

    format: str
    columns: tuple[str, ...]

    def show(self, answer: JSON, rows: Callable[[], Sequence[Mapping[str, object]]]) -> None:
        """``answer`` as it came with ``-o json``; else a table of ``rows()`` (decoded only for a table)."""
        if self.format == "json":
            click.echo(json.dumps(answer, indent=2))
        else:
            print_table(rows(), list(self.columns))


def list_options(available: Sequence[str], default: Sequence[str]) -> Callable[[F], F]:
    """Add ``-o/--output`` and ``-c/--column`` to a list command, which receives them as ``listing: ListOutput``.

    ``available`` are the keys the command's table rows have; an unknown column is refused before any request,
    with the valid ones listed.
    """
    unknown_defaults = set(default) - set(available)
    if unknown_defaults:
        raise ValueError(f"default columns {sorted(unknown_defaults)} are not among the available ones")

    def columns_from(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
        chosen = [name.strip().lower() for value in values for name in value.split(",") if name.strip()]
        unknown = [name for name in chosen if name not in available]
        if unknown:
            raise click.BadParameter(
                f"no column {', '.join(repr(name) for name in unknown)}; the columns are: {', '.join(available)}"
            )
        return tuple(chosen) or tuple(default)

    def decorate(command: F) -> F:
        command = _pack(command)
        command = click.option(
            "--column",
            "-c",
            "columns",
            multiple=True,
            metavar="NAMES",
            callback=columns_from,
            help=f"Table columns, comma-separated or repeated (default: {','.join(default)}; "
            f"all: {','.join(available)}).",
        )(command)
        command = click.option(
            "--output",
            "-o",
            "output_format",
            type=click.Choice(["table", "json"]),
            default="table",
            show_default=True,
            help="table, or json: the API's answer unchanged (all fields; --column applies to tables).",
        )(command)
        return command

    return decorate


def _pack(command: F) -> F:
    """Hand the command one ``listing`` argument in place of the two options."""

    @functools.wraps(command)
    def wrapper(*args: object, output_format: str, columns: tuple[str, ...], **kwargs: object) -> object:
        return command(*args, listing=ListOutput(output_format, columns), **kwargs)

    return wrapper  # type: ignore[return-value]


def print_table(rows: Sequence[Mapping[str, object]], columns: list[str]) -> None:
    """Aligned columns, like `coder list`."""
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max([len(column)] + [len(line[i]) for line in cells]) for i, column in enumerate(columns)]
    click.echo("  ".join(column.upper().ljust(widths[i]) for i, column in enumerate(columns)).rstrip())
    for line in cells:
        click.echo("  ".join(value.ljust(widths[i]) for i, value in enumerate(line)).rstrip())


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
