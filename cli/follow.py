"""Print a job's log as it runs, grouped by stage, and report how it ended."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from cli.client import SlipwayClient

FINISHED = ("succeeded", "failed", "canceled")
LEVEL_COLOURS = {"error": "red", "warn": "yellow", "debug": "bright_black", "trace": "bright_black"}


def follow_job(
    client: SlipwayClient, logs_path: str, read_job: Callable[[], dict[str, Any]], *, poll: float = 0.3
) -> dict[str, Any]:
    """Print new log lines until the job finishes; returns the final job object."""
    after, stage = 0, None
    while True:
        job = read_job()
        lines = client.get(f"{logs_path}?after={after}")
        for line in lines:
            after = line["id"]
            if line["stage"] and line["stage"] != stage:
                stage = line["stage"]
                click.secho(f"==> {stage}", bold=True)
            if line["output"]:
                click.secho(f"    {line['output']}", fg=LEVEL_COLOURS.get(line["level"]))
        if job["status"] in FINISHED and not lines:
            return job
        if job["status"] == "pending" and job.get("queue_position"):
            pass
        time.sleep(poll if not lines else 0)


def report(job: dict[str, Any], what: str) -> None:
    """One closing line; a failed or canceled job makes the command exit non-zero."""
    if job["status"] == "succeeded":
        click.secho(f"{what} succeeded.", fg="green")
        return
    message = f"{what} {job['status']}"
    if job.get("error"):
        message += f": {job['error']}"
    raise click.ClickException(message)
