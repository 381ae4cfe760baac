"""The web server's start gate: a pipe from the supervisor to gunicorn's master, which loads the application at
once but listens and forks its workers only once the supervisor has the database and Redis ready (app/server/web.py
holds the master's side). One byte opens it; closed without one, the supervisor gave up and the master exits."""

from __future__ import annotations

import os

# Names the read end of the pipe, a file descriptor the master inherits.
START_GATE_FD_ENV = "SLIPWAY_WEB_START_GATE_FD"
OPEN = b"1"


def wait_for_gate(fd: int) -> bool:
    """Block until the supervisor opens the gate (True) or goes away without opening it (False)."""
    try:
        # A plain blocking read (gevent leaves os.read alone): nothing else runs in the master yet.
        return os.read(fd, 1) == OPEN
    finally:
        os.close(fd)
