"""Print a job's log as it runs (the server's SSE stream), grouped by stage, and report how it ended."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import click
import httpx

from cli.client import SlipwayClient

LEVEL_COLOURS = {"error": "red", "warn": "yellow", "debug": "bright_black", "trace": "bright_black"}
RECONNECT_DELAYS = (0.5, 1.0, 2.0, 5.0)


def follow_job(client: SlipwayClient, logs_path: str, job: dict[str, Any] | None = None) -> dict[str, Any]:
    """Print lines as the server stores them until the job ends; returns the end event ({status, error?}).

    A dropped connection (a server restart, a proxy timeout) resumes after the last line printed.
    """
    if job is not None and job.get("status") == "pending" and job.get("queue_position"):
        click.secho(f"Queued (position {job['queue_position']}); waiting for a provisioner daemon…", fg="bright_black")
    cursor, stage, failures = 0, None, 0
    while True:
        try:
            for event, data in client.stream_events(f"{logs_path}?follow=true&after={cursor}"):
                failures = 0
                if event == "end":
                    result: dict[str, Any] = json.loads(data)
                    return result
                if event == "log":
                    line = json.loads(data)
                    cursor = line["id"]
                    if line["stage"] and line["stage"] != stage:
                        stage = line["stage"]
                        click.secho(f"==> {stage}", bold=True)
                    if line["output"]:
                        click.secho(f"    {line['output']}", fg=LEVEL_COLOURS.get(line["level"]))
        except httpx.TransportError as exc:
            if failures >= len(RECONNECT_DELAYS):
                raise click.ClickException(f"lost the log stream from {client.url}: {exc}") from exc
            time.sleep(RECONNECT_DELAYS[failures])
            failures += 1


def parse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs from `text/event-stream` lines; comments (heartbeats) are skipped."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)


def report(end: dict[str, Any], what: str) -> None:
    """One closing line; a failed or canceled job makes the command exit non-zero."""
    if end["status"] == "succeeded":
        click.secho(f"{what} succeeded.", fg="green")
        return
    message = f"{what} {end['status']}"
    if end.get("error"):
        message += f": {end['error']}"
    raise click.ClickException(message)
