"""Reading Server-Sent Events: the server's live log and status streams (API.md "Logs")."""

from __future__ import annotations

from collections.abc import Iterator


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
