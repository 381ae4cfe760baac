"""Server-Sent Events on the wire: events, the response that carries them, and where a reconnect resumes."""

from __future__ import annotations

import re
from collections.abc import Iterator

from flask import Response, stream_with_context

from app.core.errors import InvalidInput
from app.core.limits import live_stream
from protocol.values import parse_int

# Sent first: it opens the stream through proxies at once and tells EventSource how soon to come back.
STREAM_PREAMBLE = ": connected\nretry: 1000\n\n"
HEARTBEAT = ": heartbeat\n\n"
# SSE ends a line at CR, LF or CRLF: each becomes its own `data:` line, so nothing in the data (a log line with a
# carriage return, say) can start a field of its own, such as `event: end` or `id:`.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_event(event: str, data: str, event_id: int | None = None) -> str:
    lines = [f"id: {event_id}"] if event_id is not None else []
    lines.append(f"event: {event}")
    lines += [f"data: {part}" for part in _LINE_BREAK.split(data)]
    return "\n".join(lines) + "\n\n"


def event_stream(events: Iterator[str]) -> Response:
    # no-cache and no proxy buffering: each event must reach the viewer as soon as it is written.
    return Response(
        stream_with_context(live_stream(events)),  # a slot per stream, and a lifetime (app/core/limits.py)
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def stream_cursor(after_arg: str | None, last_event_id: str | None) -> int:
    """Resume point: Last-Event-ID (what EventSource sends on reconnect) wins over ``?after=``; either must be a
    log id (a whole number), or the request is refused rather than silently restarted."""
    for name, candidate in (("Last-Event-ID", last_event_id), ("after", after_arg)):
        if candidate is not None and candidate.strip():
            return log_cursor(candidate.strip(), name)
    return 0


def log_cursor(text: str, name: str = "after") -> int:
    try:
        return parse_int(text)
    except ValueError:
        raise InvalidInput(f"{name} must be a log id (a whole number).") from None
