"""`slipway agent-bundle`: fetch, once, the wheels workspaces install the agent from, so the server can serve it
offline. Needs PyPI (or the index pip is configured with); run it again after upgrading Slipway."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from cli.wheelhouse import DEFAULT_JOBS, WheelhouseError, build_wheelhouse
from protocol.agent_bundle import DEFAULT_PLATFORMS, PLATFORMS, PYTHON_VERSIONS, default_agent_wheelhouse


def _python_versions(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if not re.fullmatch(r"3\.\d{1,2}", value):
            raise click.BadParameter(f"{value!r} is not a Python version like 3.12")
    return values


@click.command("agent-bundle")
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="SLIPWAY_AGENT_WHEELHOUSE",
    show_envvar=True,
    help="The wheelhouse the server reads (its --agent-wheelhouse). [default: PREFIX/share/slipway/agent-wheels]",
)
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    type=click.Choice(sorted(PLATFORMS)),
    help=f"OS-ARCH to build (repeatable). [default: {', '.join(DEFAULT_PLATFORMS)}]",
)
@click.option(
    "--python-version",
    "python_versions",
    multiple=True,
    callback=_python_versions,
    help=f"Python version workspaces may have (repeatable). [default: {', '.join(PYTHON_VERSIONS)}]",
)
@click.option("--jobs", type=click.IntRange(1, 32), default=DEFAULT_JOBS, show_default=True, help="Parallel downloads.")
def agent_bundle(dest: Path | None, platforms: tuple[str, ...], python_versions: tuple[str, ...], jobs: int) -> None:
    """Download the wheels of the agent's dependencies for each workspace platform.

    The versions are the ones this Slipway runs with. Platforms whose wheels do not exist on the index are
    reported and skipped; the command fails only when nothing could be built.
    """
    directory = dest or default_agent_wheelhouse()
    chosen, versions = platforms or DEFAULT_PLATFORMS, python_versions or PYTHON_VERSIONS
    click.echo(f"Fetching agent wheels for {', '.join(chosen)} (Python {', '.join(versions)}) into {directory}")
    try:
        report = build_wheelhouse(directory, chosen, versions, jobs=jobs, progress=lambda line: click.echo(f"  {line}"))
    except (WheelhouseError, OSError) as exc:
        click.echo(f"slipway agent-bundle: {exc}", err=True)
        sys.exit(1)
    for result in report.platforms:
        if result.errors:
            outcome = f"built for Python {', '.join(result.python_versions)} only" if result.ok else "not built"
            click.echo(f"  {result.platform}: {outcome}: {_reasons(result.errors)}", err=True)
    built = report.built
    size = sum(result.size for result in built) / 1e6
    names = ", ".join(result.platform for result in built) or "nothing"
    click.echo(f"Agent bundle: built {names} ({size:.1f} MB) in {report.seconds:.1f} s")
    if not built:
        sys.exit(1)


def _reasons(errors: dict[str, str]) -> str:
    """One reason per line of output, with the Python versions it applies to."""
    versions: dict[str, list[str]] = {}
    for version, reason in errors.items():
        versions.setdefault(reason, []).append(version)
    return "; ".join(f"{reason} (Python {', '.join(found)})" for reason, found in versions.items())


if __name__ == "__main__":  # `python -m cli.agent_bundle`: the Makefile's way, before the command is registered
    agent_bundle(prog_name="slipway agent-bundle")
