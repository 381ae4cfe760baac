"""A small SSE client for tests: parses `text/event-stream` into (event, id, data) tuples."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Event:
    event: str
    id: int | None
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


def events(response: httpx.Response) -> Iterator[Event]:
    event, event_id, data = "message", None, []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield Event(event, event_id, "\n".join(data))
            event, event_id, data = "message", None, []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "id":
                event_id = int(value)
            elif field == "data":
                data.append(value)
