"""Print a job's log as it runs (the server's SSE stream), grouped by stage, and report how it ended."""

from __future__ import annotations

import time

import click
import httpx

from cli.client import ApiError, SlipwayClient
from protocol.codec import ProtocolError
from protocol.logs import FailureCause, JobLog, LogStreamEnd
from protocol.publicapi import Job

LEVEL_COLOURS = {"error": "red", "warn": "yellow", "debug": "bright_black", "trace": "bright_black"}
# A dropped stream is resumed: soon, then every few seconds, for as long as a server restart or a database
# failover may take; past that, the command gives up and says why.
RECONNECT_DELAYS = (0.5, 1.0, 2.0, 5.0)
GIVE_UP_AFTER_SECONDS = 300.0
# What a server says while it restarts or its database is away (app/core/errors.py): worth waiting out.
PASSING_STATUSES = (502, 503, 504)


def follow_job(client: SlipwayClient, logs_path: str, job: Job | None = None, *, after: int = 0) -> LogStreamEnd:
    """Print lines (after line ``after``) as the server stores them until the job ends, or waits for a person
    (awaiting_confirmation); returns how it ended.

    A dropped connection (a server restart, a proxy timeout, a database away: 502-504) resumes after the last line
    printed.
    """
    if job is not None and job.status == "pending" and job.queue_position:
        click.secho(f"Queued (position {job.queue_position}); waiting for a provisioner daemon…", fg="bright_black")
    cursor, stage, reconnect = after, None, _Reconnect(client.url)
    while True:
        try:
            for event, data in client.stream_events(f"{logs_path}?follow=true&after={cursor}"):
                reconnect.resumed()
                if event == "end":
                    return LogStreamEnd.loads(data)
                if event == "log":
                    line = JobLog.loads(data)
                    cursor = line.id
                    stage = print_log_line(line, stage)
        except ProtocolError as exc:
            raise click.ClickException(f"the server's log stream is not what this CLI understands: {exc}") from exc
        except (httpx.TransportError, ApiError) as exc:
            reconnect.failed(exc)


def print_log_line(line: JobLog, stage: str | None) -> str | None:
    """Print ``line`` (under a heading when its stage begins); returns the stage now shown."""
    if line.stage and line.stage != stage:
        stage = line.stage
        click.secho(f"==> {stage}", bold=True)
    if line.output:
        click.secho(f"    {line.output}", fg=LEVEL_COLOURS.get(line.level))
    elif line.source == "provisioner":  # Terraform's blank lines (between a diagnostic's parts) read as it prints
        click.echo("")
    return stage


class _Reconnect:
    def __init__(self, url: str) -> None:
        self.url = url
        self.failures = 0
        self.lost_since = 0.0

    def resumed(self) -> None:
        if self.failures:
            click.secho("(reconnected)", fg="bright_black", err=True)
        self.failures = 0

    def failed(self, problem: httpx.TransportError | ApiError) -> None:
        """Wait before the next try, or give up (raise) when the problem will not pass or has lasted too long."""
        if isinstance(problem, ApiError) and problem.status not in PASSING_STATUSES:
            raise problem
        reason = problem.message if isinstance(problem, ApiError) else str(problem) or problem.__class__.__name__
        now = time.monotonic()
        if not self.failures:
            self.lost_since = now
            click.secho(f"(lost the log stream: {reason}; reconnecting…)", fg="bright_black", err=True)
        elif now - self.lost_since > GIVE_UP_AFTER_SECONDS:
            raise click.ClickException(f"lost the log stream from {self.url}: {reason}") from problem
        time.sleep(RECONNECT_DELAYS[min(self.failures, len(RECONNECT_DELAYS) - 1)])
        self.failures += 1


def report(end: LogStreamEnd, what: str, *, page_url: str = "") -> None:
    """One closing line; a failed or canceled job makes the command exit non-zero. A failure says why (the
    error's first line and the resource, as the job's page does) and where to read more: the log line on the job's
    page (``page_url``)."""
    if end.status == "succeeded":
        click.secho(f"{what} succeeded.", fg="green")
        return
    if end.failure is None:
        message = f"{what} {end.status}"
        if end.error:
            message += f": {end.error}"
        raise click.ClickException(message)
    raise click.ClickException(failure_message(end.failure, what, page_url=page_url))


def failure_message(failure: FailureCause, what: str, *, page_url: str = "") -> str:
    """``<what> failed: <first line> (in <resource>)``, and a one-line hint: where the error is in the log."""
    message = f"{what} failed: {failure.message}"
    if failure.resource:
        message += f" (in {failure.resource})"
    if page_url:
        anchor = f"#log-line-{failure.log_line_id}" if failure.log_line_id else ""
        message += f"\nhint: the error in the log: {page_url}{anchor}"
    return message
