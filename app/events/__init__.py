"""The live-event bus of the web server (DESIGN.md "Logs, live"): one Redis subscription per process, fanned out
in memory to whatever is live here — log and status streams, waiting daemons, agents' control connections.

Redis carries only notices ("job X has new lines", "agent Y changed") and signed dials; every stream reads what
changed from the database itself, so a lost notice delays, and never loses or repeats, anything.
"""

from __future__ import annotations

from flask import Flask, current_app

from app.events.relay import EventRelay

EXTENSION_KEY = "slipway_events"


def init_app(app: Flask) -> None:
    # The relay's thread and subscription start with the first stream that watches something.
    app.extensions[EXTENSION_KEY] = EventRelay(app.config["SLIPWAY_SETTINGS"].redis_url)


def get_relay() -> EventRelay:
    relay: EventRelay = current_app.extensions[EXTENSION_KEY]
    return relay


def close_relay(app: Flask) -> None:
    """Stop ``app``'s relay following Redis (an app closed while the process lives on, as in the tests)."""
    relay: EventRelay = app.extensions[EXTENSION_KEY]
    relay.close()
