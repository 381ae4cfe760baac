"""Print a job's log as it runs (the server's SSE stream), grouped by stage, and report how it ended."""

from __future__ import annotations

import time

import click
import httpx

from cli.client import SlipwayClient
from protocol.codec import ProtocolError
from protocol.logs import JobLog, LogStreamEnd
from protocol.publicapi import Job

LEVEL_COLOURS = {"error": "red", "warn": "yellow", "debug": "bright_black", "trace": "bright_black"}
RECONNECT_DELAYS = (0.5, 1.0, 2.0, 5.0)


def follow_job(client: SlipwayClient, logs_path: str, job: Job | None = None, *, after: int = 0) -> LogStreamEnd:
    """Print lines (after line ``after``) as the server stores them until the job ends, or waits for a person
    (awaiting_confirmation); returns how it ended.

    A dropped connection (a server restart, a proxy timeout) resumes after the last line printed.
    """
    if job is not None and job.status == "pending" and job.queue_position:
        click.secho(f"Queued (position {job.queue_position}); waiting for a provisioner daemon…", fg="bright_black")
    cursor, stage, failures = after, None, 0
    while True:
        try:
            for event, data in client.stream_events(f"{logs_path}?follow=true&after={cursor}"):
                failures = 0
                if event == "end":
                    return LogStreamEnd.loads(data)
                if event == "log":
                    line = JobLog.loads(data)
                    cursor = line.id
                    if line.stage and line.stage != stage:
                        stage = line.stage
                        click.secho(f"==> {stage}", bold=True)
                    if line.output:
                        click.secho(f"    {line.output}", fg=LEVEL_COLOURS.get(line.level))
        except ProtocolError as exc:
            raise click.ClickException(f"the server's log stream is not what this CLI understands: {exc}") from exc
        except httpx.TransportError as exc:
            if failures >= len(RECONNECT_DELAYS):
                raise click.ClickException(f"lost the log stream from {client.url}: {exc}") from exc
            time.sleep(RECONNECT_DELAYS[failures])
            failures += 1


def report(end: LogStreamEnd, what: str) -> None:
    """One closing line; a failed or canceled job makes the command exit non-zero."""
    if end.status == "succeeded":
        click.secho(f"{what} succeeded.", fg="green")
        return
    message = f"{what} {end.status}"
    if end.error:
        message += f": {end.error}"
    raise click.ClickException(message)
